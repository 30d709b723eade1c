"""The policy server for edge actors without a GPU (`robo-async serve`); see server.py."""

from robo_async.serve.config import ServeConfig
from robo_async.serve.server import PolicyServer, spec_json

__all__ = ["PolicyServer", "ServeConfig", "spec_json"]
