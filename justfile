# The same two lines as the README's Quick start, and a few more for developers.

venv := ".venv"

# Install and run poolwise on an embedded NATS server.
up:
    python3 -m venv {{venv}} && {{venv}}/bin/pip install -q -e '.[test]' && {{venv}}/bin/poolwise up

# Install and run the whole test suite.
test:
    python3 -m venv {{venv}} && {{venv}}/bin/pip install -q -e '.[test]' && {{venv}}/bin/python -m pytest -q -n 2 --dist loadfile

# Lint and type-check (mypy --strict on the pure domain code).
check:
    {{venv}}/bin/ruff check events projections services tests bench
    {{venv}}/bin/mypy --strict services/tree/domain services/admission/domain services/entitlement events

# Property tests drawing new examples each run (the suite itself is derandomized).
fuzz:
    HYPOTHESIS_PROFILE=deep {{venv}}/bin/python -m pytest -q -m "not nats" tests

# Run the scenarios kept in this repository (docs/scenarios.md).
scenarios:
    {{venv}}/bin/poolwise scenario run docs/examples/*.yaml tests/scenario/files/*.yaml

# Benchmarks; results go in docs/performance.md.
bench:
    {{venv}}/bin/poolwise bench all

# Soak (issue 18): the tiny live soak test, then `poolwise bench soak --quick` (~10 min; the full sizes: `poolwise bench soak`).
soak:
    POOLWISE_SOAK=1 {{venv}}/bin/python -m pytest -q tests/bench/test_soak.py
    {{venv}}/bin/poolwise bench soak --quick

# The replicated log (issue 19): a 3-node cluster from deploy/nats/ on loopback, the services on it
# with --replicas 3, a node killed and the stream's leader stopped mid-burst (~1 min; also in `just test`).
cluster:
    {{venv}}/bin/python -m pytest -q -m cluster tests/cluster
