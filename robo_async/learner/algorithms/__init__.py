"""Learning algorithms behind one seam (`base.Algorithm`), one folder each, chosen by `algo=`."""

from robo_async.learner.algorithms.base import (
    AlgoConfig,
    Algorithm,
    PolicySpec,
    algorithms,
    build_algorithm,
    config_class,
    register,
)

__all__ = ["AlgoConfig", "Algorithm", "PolicySpec", "algorithms", "build_algorithm", "config_class", "register"]
