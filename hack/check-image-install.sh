#!/usr/bin/env bash
# Check the image's install steps without Docker: replay the Dockerfile's build stage
# (`FROM ... AS build` up to the next FROM: its ENV, WORKDIR, COPY and RUN lines, read from
# the Dockerfile itself, so they cannot drift apart) in a fresh directory and a fresh venv,
# then run what the image's entrypoint serves:
#   kdra --help, kdra operator --help, kdra agent --help, kdra describe --help
# and import every module the operator and the agent load at start-up.
#
#   hack/check-image-install.sh            (PYTHON=python3.11 by default; KEEP=1 keeps the dir)
#
# What it does not replay: the base image (this machine's Python 3.11 stands in for
# python:3.11-slim), BuildKit cache mounts (pip uses this user's cache instead), and the final
# stage (which only copies the venv and adds a user). Needs the package index (pip downloads
# the pinned wheels once; later runs hit pip's cache).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3.11}
command -v "$PYTHON" >/dev/null || { echo "$PYTHON not found (set PYTHON=...)" >&2; exit 2; }
"$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' \
  || { echo "$PYTHON is not Python 3.11, the image's Python" >&2; exit 2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/kdra-image-check.XXXXXX")
if [[ -z "${KEEP:-}" ]]; then trap 'rm -rf "$WORK"' EXIT; else echo "work dir: $WORK"; fi

# `python` in RUN lines is the image's interpreter: stand this one in for it.
mkdir -p "$WORK/shim"
ln -s "$(command -v "$PYTHON")" "$WORK/shim/python"

# Translate the build stage into a shell script. Image paths are re-rooted under $WORK/fs.
"$PYTHON" - "$ROOT" "$WORK" > "$WORK/steps.sh" <<'PY'
import shlex
import sys
from pathlib import Path

root, work = Path(sys.argv[1]), Path(sys.argv[2])
fs = work / "fs"


def instructions(text):
    """(KEYWORD, arguments) with continuation lines joined and comment lines dropped."""
    current = ""
    for line in text.splitlines():
        if line.lstrip().startswith("#") or not line.strip():
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        keyword, _, rest = current.strip().partition(" ")
        yield keyword.upper(), rest.strip()
        current = ""


def image_path(path, workdir):
    path = path if path.startswith("/") else f"{workdir}/{path}"
    return fs / path.lstrip("/")


stage, workdir, out = None, "/", ["set -euxo pipefail", f'export PATH="{work}/shim:$PATH"']
for keyword, args in instructions((root / "Dockerfile").read_text()):
    if keyword == "FROM":
        words = args.split()
        stage = words[-1] if len(words) >= 3 and words[-2].upper() == "AS" else "final"
        continue
    if stage != "build":
        continue
    if keyword == "ENV":
        for pair in shlex.split(args):
            name, _, value = pair.partition("=")
            if value.startswith("/"):  # an image path: re-root it
                value = str(fs / value.lstrip("/"))
            out.append(f"export {name}={shlex.quote(value)}")
    elif keyword == "WORKDIR":
        workdir = args if args.startswith("/") else f"{workdir}/{args}"
        out.append(f"mkdir -p {shlex.quote(str(image_path(workdir, '/')))}")
        out.append(f"cd {shlex.quote(str(image_path(workdir, '/')))}")
    elif keyword == "COPY":
        *sources, dest = [w for w in shlex.split(args) if not w.startswith("--")]
        target = image_path(dest, workdir)
        for source in sources:
            src = root / source
            if src.is_dir():  # Docker copies a directory's contents
                out.append(f"mkdir -p {shlex.quote(str(target))}")
                out.append(f"cp -R {shlex.quote(str(src))}/. {shlex.quote(str(target))}/")
            else:
                out.append(f"mkdir -p {shlex.quote(str(target if dest.endswith('/') else target.parent))}")
                out.append(f"cp {shlex.quote(str(src))} {shlex.quote(str(target))}")
        # What .dockerignore keeps out of the context.
        out.append(f"find {shlex.quote(str(target))} \\( -name __pycache__ -o -name '*.egg-info' "
                   f"\\) -prune -exec rm -rf {{}} +")
    elif keyword == "RUN":
        words = args.split(" ")
        while words and words[0].startswith("--"):  # --mount=..., --network=...
            words.pop(0)
        out.append(" ".join(words).strip())
    elif keyword in ("ARG", "LABEL", "EXPOSE", "USER", "ENTRYPOINT", "CMD"):
        continue
    else:
        sys.exit(f"check-image-install.sh does not know how to replay {keyword} in the build "
                 "stage: teach it, or move that step out of the build stage")
if not any(line.startswith("export VIRTUAL_ENV=") for line in out):
    sys.exit("the build stage sets no VIRTUAL_ENV: where does it install kdra?")
print("\n".join(out))
PY

echo "== replaying the Dockerfile's build stage (steps in $WORK/steps.sh)"
bash "$WORK/steps.sh"

VENV=$(sed -n 's/^export VIRTUAL_ENV=//p' "$WORK/steps.sh" | tail -n 1)
VENV=${VENV//\'/}
echo "== what the image serves (entrypoint kdra, from $VENV)"
for args in "--help" "operator --help" "agent --help" "describe --help"; do
  echo "-- kdra $args"
  # shellcheck disable=SC2086
  env -i PATH="$VENV/bin:/usr/bin:/bin" HOME="$WORK" "$VENV/bin/kdra" $args >"$WORK/out.txt"
  head -n 3 "$WORK/out.txt"
done
env -i PATH="$VENV/bin:/usr/bin:/bin" HOME="$WORK" "$VENV/bin/python" -c '
import kdra.operator.handlers.routes, kdra.agent.process, kdra.agent.backends.nvml
import kdra.agent.kubelet.plugin, kdra.kube.reader
import pykube, pynvml, grpc
print("imports ok: operator handlers, agent process, NVML backend, kubelet plugin (grpc), the CLI client (pykube-ng)")'
if "$VENV/bin/python" -c 'import pip' 2>/dev/null; then
  echo "pip is still in the runtime venv (the Dockerfile removes it)" >&2; exit 1
fi
echo "== image install check passed"
