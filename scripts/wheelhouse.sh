#!/usr/bin/env bash
# Offline wheelhouse for an air-gapped GPU node: vLLM, everything it imports to serve,
# and verifiers' own wheel with its training stack, for one Python / platform pair.
#
#   scripts/wheelhouse.sh DIR [--vllm 0.26.0] [--python 3.12] [--platform manylinux_2_35_x86_64]
#                             [--no-torch] [--have FREEZE.txt]
#
#   --vllm V        vLLM version (default 0.26.0: the newest release built for torch 2.11 / CUDA 13,
#                   and the lower bound of verifiers' tested range, see docs/gpu.md)
#   --python X.Y    the node's Python (default 3.12)
#   --platform TAG  the node's wheel platform (default manylinux_2_35_x86_64: glibc 2.35, Ubuntu 22.04;
#                   older manylinux wheels are taken too). vLLM 0.26 needs glibc >= 2.31: its
#                   llguidance 1.7 has no older wheel
#   --no-torch      leave out torch, torchvision, torchaudio and all they pull in (CUDA libraries,
#                   triton, ...): for a GPU image that already has vLLM's torch (0.26 pins torch==2.11.0)
#   --have FILE     leave out every distribution named in FILE (`pip freeze` of the node's image)
#
# On the node:  pip install --no-index --find-links DIR "verifiers[train,vllm]"
# (docs/gpu.md). Prints one line per stage and the folder's size at the end.
set -euo pipefail
usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }

dir=""; vllm=0.26.0; py=3.12; platform=manylinux_2_35_x86_64; no_torch=0; have=""
while [ $# -gt 0 ]; do
  case $1 in
    --vllm) vllm=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --platform) platform=$2; shift 2 ;;
    --no-torch) no_torch=1; shift ;;
    --have) have=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    -*) echo "wheelhouse: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) dir=$1; shift ;;
  esac
done
[ -n "$dir" ] || { echo "wheelhouse: give the folder to fill (see --help)" >&2; exit 2; }
[ -z "$have" ] || [ -f "$have" ] || { echo "wheelhouse: --have $have is not a file" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# pip evaluates environment markers (python_version > "3.11" ...) with the interpreter it runs
# on, whatever --python-version says: resolve with the node's Python where there is one.
PYTHON=${PYTHON:-python$py}
if ! "$PYTHON" -c "import sys; assert '%d.%d' % sys.version_info[:2] == '$py'" 2>/dev/null; then
  echo "[wheelhouse] warning: no python$py here (set PYTHON=...): markers follow $(python -V 2>&1)" >&2
  PYTHON=python
fi
PIP=("$PYTHON" -m pip --disable-pip-version-check)
abi="cp${py/./}"
# pip matches --platform literally: name every older manylinux tag too, as an installer would.
platforms=(--platform "$platform")
if [[ $platform =~ ^manylinux_2_([0-9]+)_(.+)$ ]]; then
  for ((k = BASH_REMATCH[1] - 1; k >= 5; k--)); do platforms+=(--platform "manylinux_2_${k}_${BASH_REMATCH[2]}"); done
  for legacy in manylinux2014 manylinux2010 manylinux1; do platforms+=(--platform "${legacy}_${BASH_REMATCH[2]}"); done
fi
target=(--python-version "$py" --implementation cp --abi "$abi" --abi abi3 --abi none "${platforms[@]}" --platform any --only-binary=:all:)

echo "[wheelhouse] verifiers wheel ..." >&2
"${PIP[@]}" wheel --no-deps -q -w "$dir" "$root" >"$work/wheel.log" 2>&1 \
  || { tail -n 20 "$work/wheel.log" >&2; exit 1; }
wheel=$(ls -t "$dir"/verifiers-*.whl | head -n 1)

# Resolve vLLM + verifiers[train] (+ ray: vLLM 0.26's IPC engine imports it, undeclared; the
# import check in docs/gpu.md found it) for the node's Python and platform (pip reads each
# candidate's metadata, PEP 658, without downloading the wheels), then download what
# is not excluded, each pinned, without resolving again.
echo "[wheelhouse] resolving vllm==$vllm and verifiers[train] for Python $py on $platform ..." >&2
"${PIP[@]}" install --dry-run --ignore-installed --target "$work/t" "${target[@]}" \
  --report "$work/report.json" "vllm==$vllm" "$wheel[train]" ray >"$work/resolve.log" 2>&1 \
  || { tail -n 20 "$work/resolve.log" >&2; exit 1; }
"$PYTHON" - "$work/report.json" "$no_torch" "$have" >"$work/pins.txt" <<'EOF'
import json, re, sys

report, no_torch, have = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
items = json.load(open(report))["install"]
by_name = {norm(i["metadata"]["name"]): i for i in items}
skip = {"verifiers"}
if no_torch:  # torch and everything it pulls in (CUDA libraries, triton, ...): the image has them
    todo = [(n, set()) for n in ("torch", "torchvision", "torchaudio") if n in by_name]
    seen = set()
    while todo:  # (name, extras asked for): torch asks for cuda-toolkit[cublas,cufft,...]
        name, extras = todo.pop()
        if (name, frozenset(extras)) in seen:
            continue
        seen.add((name, frozenset(extras)))
        skip.add(name)
        for req in by_name[name]["metadata"].get("requires_dist", []):
            m = re.match(r"\s*([A-Za-z0-9._-]+)\s*(?:\[([^\]]*)\])?", req)
            dep, wanted = norm(m.group(1)), {e.strip() for e in (m.group(2) or "").split(",") if e.strip()}
            extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", req)
            if dep in by_name and (extra is None or extra.group(1) in extras):
                todo.append((dep, wanted))
if have:
    for line in open(have):
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        if m and not line.lstrip().startswith("#"):
            skip.add(norm(m.group(1)))
for item in items:
    name, version = item["metadata"]["name"], item["metadata"]["version"]
    if norm(name) in skip:
        continue
    print(f"{name}=={version}")
EOF
echo "[wheelhouse] downloading $(wc -l <"$work/pins.txt") wheels ..." >&2
"${PIP[@]}" download --no-deps "${target[@]}" -d "$dir" -r "$work/pins.txt" >"$work/download.log" 2>&1 \
  || { tail -n 20 "$work/download.log" >&2; exit 1; }
cp "$work/pins.txt" "$dir/requirements-offline.txt"
echo "[wheelhouse] $dir: $(ls "$dir"/*.whl | wc -l) wheels, $(du -sh "$dir" | cut -f1)" >&2
echo "[wheelhouse] install on the node: pip install --no-index --find-links $dir \"verifiers[train,vllm]\"" >&2
