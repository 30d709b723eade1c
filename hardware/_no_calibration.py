"""What LeRobot devices without motors to calibrate (our simulated ones) share."""


class NoCalibration:
    """A mixin for LeRobot devices with nothing to calibrate or configure (our simulated ones): always
    calibrated, the rest no-ops."""

    @property
    def is_calibrated(self) -> bool:
        return True

    def calibrate(self) -> None:
        pass

    def configure(self) -> None:
        pass
