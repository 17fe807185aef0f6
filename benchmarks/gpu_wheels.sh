#!/usr/bin/env bash
# The wheels the GPU leg's part 5 needs that the device machine's image lacks (it reaches no
# registry): obstore, moto's server and s3fs with what they need, for its Python 3.12 on
# x86-64, into .whl/ (ignored: `echo /.whl/ >> .git/info/exclude`), about 34 MB.
#
#     bash benchmarks/gpu_wheels.sh            # here, with pip and an index
#
# Then each device call carries .whl and starts with
#     python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
#     export PYTHONPATH=/tmp/site:$PWD/src; python3 setup.py build_ext --inplace -q
# The versions are the ones tested here (2026-12-04, RESULTS.md "GPU leg (H200), 2026-12-04").
set -eu
DEST=${1:-.whl}
PY=${PYTHON:-python3}
platforms=""
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 \
  manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64 any; do
  platforms="$platforms --platform $p"
done
# shellcheck disable=SC2086  # the platforms are words
$PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  $platforms -d "$DEST" \
  obstore==0.12.1 moto==5.2.5 flask==3.1.3 flask-cors==6.0.5 werkzeug==3.1.9 \
  boto3==1.43.117 botocore==1.43.117 s3transfer==0.19.3 jmespath==1.1.0 xmltodict==1.0.4 \
  responses==0.26.3 cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 blinker==1.9.0 \
  itsdangerous==2.2.0 s3fs==2026.9.0 fsspec==2026.9.0 aiobotocore==3.10.0 \
  aioitertools==0.13.0 wrapt==2.5.2
ls "$DEST" | wc -l
