"""`python -m hardware.twin so101 ...`: the same as `robo-async twin so101 ...`."""

from hardware.twin.server import main

raise SystemExit(main())
