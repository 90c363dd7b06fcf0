#!/usr/bin/env bash
# Stages what tools/bench_atari.py and the CNN latency rows of tools/bench_infer.py need on the GPU
# machine (Python 3.12, no package registry): numpy 2.4, gymnasium, envpool 1.2.7 + its assets
# (the Atari ROMs), CleanRL's script's tyro and TensorBoard, onnxruntime-gpu (its own folder,
# /tmp/ortgpu), as one tar in parts of < 56 MiB under .gpuset-atari/ (git-ignored). Project root:
#   bash tools/stage_atari_gpu.sh
# Then, back to back (the machine stays warm ~30 s between calls):
#   call k < last (carry [".gpuset-atari/pk"]):  mkdir -p /tmp/stage && cp .gpuset-atari/pk/part* /tmp/stage/
#   last call (carry [".gpuset-atari/pN"]):  bash .gpuset-atari/pN/assemble.sh && export PYTHONPATH=/tmp/site:$PWD ...
set -euo pipefail
dir=.gpuset-atari
grep -qx "/$dir/" .git/info/exclude 2>/dev/null || echo "/$dir/" >> .git/info/exclude
rm -rf $dir; mkdir -p $dir/w/site $dir/w/ort
plat=(); for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
  manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64; do plat+=(--platform "$p"); done
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --abi cp312 --abi abi3 --abi none "${plat[@]}" -d "$@" 2>&1 | grep -v "is ignored" || true; }
dl $dir/w/site "numpy>=2.4,<2.5" gymnasium farama-notifications cloudpickle "envpool==1.2.7" \
  "envpool-assets>=0.4.1,<0.5" dm-env dm-tree optree tyro docstring-parser shtab typeguard rich \
  markdown-it-py mdurl pygments tensorboard tensorboard-data-server protobuf absl-py markdown \
  werkzeug markupsafe grpcio
dl $dir/w/ort "onnxruntime-gpu==1.31.1"
find $dir/w -name '*.whl' | wc -l
tar cf $dir/all.tar -C $dir/w . && rm -rf $dir/w
sum=$(sha256sum $dir/all.tar | cut -d' ' -f1)
split -b 55M -d -a 1 $dir/all.tar $dir/part; rm $dir/all.tar
n=0; for f in "$dir"/part*; do mkdir -p "$dir/p$n"; mv "$f" "$dir/p$n/"; n=$((n + 1)); done
last="$dir/p$((n - 1))"
cat > "$last/assemble.sh" <<SH
#!/usr/bin/env bash
# Joins the parts copied to /tmp/stage (and this folder's), checks, installs once per machine.
set -euo pipefail
[ -f /tmp/atari-installed ] && exit 0
here=\$(cd "\$(dirname "\$0")" && pwd); mkdir -p /tmp/stage; cp "\$here"/part* /tmp/stage/
cat /tmp/stage/part* > /tmp/atari.tar && rm -f /tmp/stage/part*
echo "$sum  /tmp/atari.tar" | sha256sum -c --quiet
mkdir -p /tmp/atari && tar xf /tmp/atari.tar -C /tmp/atari && rm /tmp/atari.tar
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site /tmp/atari/site/*.whl
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/ortgpu /tmp/atari/ort/*.whl
touch /tmp/atari-installed; echo "Atari set installed"
SH
chmod +x "$last/assemble.sh"
du -sh $dir/p*; echo "calls: p0..p$((n - 2)) copy, then $last/assemble.sh"
