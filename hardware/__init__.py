"""Real devices: adapters from LeRobot robots, teleoperators and cameras to `hal` (issue 4)."""
