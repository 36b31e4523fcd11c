# Sourced by the Nsight Compute scripts (profile_decode.sh, profile_decode_dram.sh) on the GPU machine, after
# they set $scripts (their folder; not "here", which the bundle's env.sh sets).

# ncu_setup BUNDLE_DIR: the bundle's environment, $OUT (created), $ncu (the ncu binary) and $reports (a new
# folder for the CSVs).
ncu_setup() {
  source "$1/env.sh"
  OUT=${OUT:-/tmp/out}
  mkdir -p "$OUT"
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  reports=$(mktemp -d)
}

# ncu_profile NAME SECONDS NCU_ARGS...: ncu under a time limit, its CSV in $reports/NAME.csv (standard input
# passes through, for a script on it), then "== NAME (rc=...)" and ncu_summary.py's digest of the CSV.
ncu_profile() {
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$ncu" "$@" >"$reports/$name.csv" 2>&1
  echo "== $name (rc=$?)"
  python3 "$scripts/ncu_summary.py" <"$reports/$name.csv"
}
