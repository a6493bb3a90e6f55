#!/usr/bin/env bash
# Mutation testing of analysis/ and of the core of trainers/ and study/ with mutmut, one module at
# a time against its fast tests, at low priority (the machine is shared); prints one JSON object
# (bench/mutation.py: score per area, surviving mutants with their diffs). A bench, not CI.
# Needs the optional extra: pip install -e ".[test,mutation]".
set -euo pipefail
cd "$(dirname "$0")/.."
python -c "import mutmut" 2>/dev/null \
    || { echo '{"bench": "mutation", "error": "mutmut missing: pip install -e \".[test,mutation]\" first"}'; exit 1; }
exec nice -n "${MUTATION_NICE:-10}" python -m bench.mutation "$@"
