#!/usr/bin/env bash
# ctest serve_openai: a venv with the openai package (from PyPI, made once in
# VENV_DIR and reused), then tests/serve/test_openai.py in it.
# usage: tests/serve/run_openai.sh DIFFRT MODELS_DIR VENV_DIR
set -euo pipefail
diffrt=$1 models=$2 venv=$3
here=$(cd "$(dirname "$0")" && pwd)
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import openai" 2>/dev/null; then
  echo "serve_openai: making $venv with the openai package"
  python3 -m venv "$venv" || { echo "serve_openai: python3 -m venv failed (Debian: apt-get install python3-venv)"; exit 1; }
  "$venv/bin/python" -m pip install -q --disable-pip-version-check openai ||
    { echo "serve_openai: pip install openai failed (PyPI must be reachable)"; exit 1; }
fi
exec "$venv/bin/python" "$here/test_openai.py" --diffrt "$diffrt" --models "$models"
