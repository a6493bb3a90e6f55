#!/usr/bin/env bash
# Mutation testing of every module of hpstudy with mutmut: a seeded sample of mutants per package
# against the fast tier, at low priority (the machine is shared); prints one JSON object
# (bench/mutation.py: score per package and module, surviving mutants with their diffs) and exits 1
# when a package misses its target. A bench, not CI.
# Needs the optional extra: pip install -e ".[test,mutation]".
set -euo pipefail
cd "$(dirname "$0")/.."
python -c "import mutmut" 2>/dev/null \
    || { echo '{"bench": "mutation", "error": "mutmut missing: pip install -e \".[test,mutation]\" first"}'; exit 1; }
exec nice -n "${MUTATION_NICE:-10}" python -m bench.mutation "$@"
