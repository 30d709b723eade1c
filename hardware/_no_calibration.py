"""What LeRobot devices without motors to calibrate (our simulated ones) share."""


class NoCalibration:
    @property
    def is_calibrated(self) -> bool:
        return True

    def calibrate(self) -> None:
        pass

    def configure(self) -> None:
        pass
