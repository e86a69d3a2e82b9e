#!/bin/bash
# The main demo: installs what is missing, builds, then trains the example MLP (examples/trainer) on 4 local
# ranks with every algorithm and prints one table. --shaped runs the same on the test bed: 4 hosts x 1 rank
# joined by 1 Gbit/s links (needs root; scripts/netns-cluster.sh).
#   scripts/run.sh [--shaped]        (BAGUA_DEMO_RANKS=4, BAGUA_DEMO_ARGS="--epochs 8")
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
shaped=0
[ "${1:-}" = "--shaped" ] && shaped=1
ranks=${BAGUA_DEMO_RANKS:-4}
args=(${BAGUA_DEMO_ARGS:-})
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
launch() {
  if [ $shaped = 1 ]; then
    BAGUA_NETNS_STATE="$tmp/state" scripts/netns-cluster.sh run --hosts "$ranks" --ranks-per-host 1 --rate 1gbit -- \
      "$PWD/build/bin/bagua_trainer" "$@"
  else
    build/bin/bagua-run -n "$ranks" build/bin/bagua_trainer "$@"
  fi
}
# The shaped demo's model has 561k parameters (2.1 MiB of gradients), whose allreduce at 1 Gbit/s takes
# several times the compute of a step: the regime the relaxations are for.
sgd_args=()
if [ $shaped = 1 ]; then
  args+=(--features 128 --hidden 4096 --batch 32 --train-samples 4096 --epochs 3)
  sgd_args=(--lr 0.003)
fi
algos="allreduce allreduce_adam bytegrad qadam onebit_adam decentralized lpdec async"
echo "Training a 2-layer MLP on $ranks ranks$([ $shaped = 1 ] && echo ", test bed at 1 Gbit/s") with each algorithm ..."
for algo in $algos; do
  case $algo in
    allreduce_adam) extra=(--algorithm allreduce --optimizer adam) ;;
    qadam | onebit_adam) extra=(--algorithm "$algo") ;;
    *) extra=(--algorithm "$algo" "${sgd_args[@]}") ;;
  esac
  launch "${extra[@]}" "${args[@]}" | grep '^summary' > "$tmp/$algo" || { echo "$algo failed"; exit 1; }
done
printf "\n%-14s %10s %9s %9s %12s %9s\n" algorithm final_loss accuracy step_ms bytes/step speedup
step_of() { sed -n 's/.* step_ms=\([^ ]*\).*/\1/p' "$tmp/$1"; }
for algo in $algos; do
  base=$(step_of allreduce)
  case $algo in allreduce_adam | qadam | onebit_adam) base=$(step_of allreduce_adam) ;; esac
  sed -n 's/^summary .* loss=\([^ ]*\) accuracy=\([^ ]*\) step_ms=\([^ ]*\) bytes_per_step=\([^ ]*\).*/\1 \2 \3 \4/p' "$tmp/$algo" |
    awk -v a="$algo" -v b="$base" '{printf "%-14s %10.4f %8.2f%% %9.3f %12s %8.2fx\n", a, $1, 100 * $2, $3,
                                    (a == "async" ? "(own comm)" : $4), b / $3}'
done
echo
echo "qadam and onebit_adam use Adam and are compared with allreduce_adam (full precision, Adam); the others use"
echo "SGD with momentum and are compared with allreduce. bytes/step: what this rank's communicator sent per step"
echo "(the scheduler's own; async averages on its own one)."
