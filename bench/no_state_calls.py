"""The service's worker daemon with the state store's entry calls answered in the worker: the
ceiling of everything but the state path, for any bench that runs `streamjoin run`.

Usage: give the service `SPARK_CONF_SPARK_PYTHON_DAEMON_MODULE=bench.no_state_calls` (with this
repository on `PYTHONPATH`), e.g. `state_scaling.py ... --candidate-env
SPARK_CONF_SPARK_PYTHON_DAEMON_MODULE=bench.no_state_calls`. Not the spelling with dots: the
shared benches start their candidate through `/bin/sh`, which drops such names where it is dash.

Every worker forks from this daemon, so in all of them a pipelined read of entries
(`StateWire.get_values`) finds nothing without asking Spark's state server, and a pipelined
write (`StateWire.write_values`) stores nothing. Everything else runs as it does: the sources,
the micro-batches, the operators' Python, the encoding, the bucket's own value, the exactly-once
sink, and the warm copies (`state.store.warm`): with them on (the default) a read they answer
never reaches `get_values`, so the output stays right while every read hits them, and the run
measures the state server's part of the state path. With `WARM_STATE_MB=0` every read finds
nothing and the output is wrong by design (a temporal join emits no order; a regular join joins
nothing stored). Compare speeds, never rows: the state's share of a run is the difference between
it and a run without this daemon.
"""

from __future__ import annotations

from state.spark.pipelined import StateWire


def _nothing_found(_wire: StateWire, keys: list[bytes]) -> list[bytes | None]:
    return [None] * len(keys)


def _nothing_stored(
    _wire: StateWire, puts: list[tuple[bytes, bytes]], removes: list[bytes]
) -> None:
    """Drops the writes."""


StateWire.get_values = _nothing_found  # type: ignore[method-assign]
StateWire.write_values = _nothing_stored  # type: ignore[method-assign]

if __name__ == "__main__":
    from app.run.worker_daemon import main

    main()
