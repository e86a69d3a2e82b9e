#!/bin/bash
# bagua-run stops the job when one rank fails, names the rank and how it ended, and exits non-zero.
set -u
RUN=$1
MP_INIT=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# A rank that exits with code 3 while the others wait in init: bagua-run must stop them and report rank 2.
cat > "$tmp/job.sh" <<'JOB'
#!/bin/bash
if [ "$BAGUA_RANK" = 2 ]; then exit 3; fi
exec "$MP_INIT"
JOB
chmod +x "$tmp/job.sh"
start=$(date +%s)
MP_INIT=$MP_INIT BAGUA_TIMEOUT=60 "$RUN" -n 4 "$tmp/job.sh" 2> "$tmp/err"
rc=$?
elapsed=$(( $(date +%s) - start ))
cat "$tmp/err"
[ "$rc" = 3 ] || { echo "FAIL: exit code $rc, expected 3"; exit 1; }
grep -q "rank 2 (pid [0-9]*) exited with code 3" "$tmp/err" || { echo "FAIL: rank not named"; exit 1; }
[ "$elapsed" -lt 20 ] || { echo "FAIL: took ${elapsed}s to stop the others"; exit 1; }

# A rank killed by a signal is reported with the signal.
cat > "$tmp/sig.sh" <<'JOB'
#!/bin/bash
if [ "$BAGUA_RANK" = 1 ]; then kill -KILL $$; fi
sleep 30
JOB
chmod +x "$tmp/sig.sh"
"$RUN" -n 2 "$tmp/sig.sh" 2> "$tmp/err2"
rc=$?
cat "$tmp/err2"
[ "$rc" = 137 ] || { echo "FAIL: exit code $rc, expected 137"; exit 1; }
grep -q "rank 1 (pid [0-9]*) was killed by signal 9" "$tmp/err2" || { echo "FAIL: signal not named"; exit 1; }

# --tag-output prefixes each line with its rank.
"$RUN" -n 2 --tag-output bash -c 'echo hello from $BAGUA_RANK' > "$tmp/out"
grep -q "^\[0\] hello from 0$" "$tmp/out" && grep -q "^\[1\] hello from 1$" "$tmp/out" ||
  { cat "$tmp/out"; echo "FAIL: tagged output"; exit 1; }

# --tag-output: a process a rank leaves behind, holding the rank's output, keeps bagua-run only about 2 s more.
start=$(date +%s)
LEFT="$tmp/left.pid" "$RUN" -n 1 --tag-output bash -c 'sleep 60 & echo $! > "$LEFT"; echo left behind' \
  > "$tmp/out4" 2> "$tmp/err4"
rc=$?
elapsed=$(( $(date +%s) - start ))
kill "$(cat "$tmp/left.pid")" 2>/dev/null
cat "$tmp/err4"
[ "$rc" = 0 ] || { echo "FAIL: exit code $rc with a process left behind"; exit 1; }
grep -q "^\[0\] left behind$" "$tmp/out4" || { cat "$tmp/out4"; echo "FAIL: output before the exit lost"; exit 1; }
grep -q "rank 0 exited, but a process it started still holds its stdout" "$tmp/err4" ||
  { echo "FAIL: no note on the held output"; exit 1; }
[ "$elapsed" -lt 10 ] || { echo "FAIL: waited ${elapsed}s for a process left behind"; exit 1; }

# SIGTERM to bagua-run reaches the ranks.
"$RUN" -n 2 sleep 30 &
pid=$!
sleep 1
kill -TERM $pid
wait $pid
rc=$?
[ "$rc" = 143 ] || { echo "FAIL: after SIGTERM exit code $rc, expected 143"; exit 1; }

# Missing program: a clear message.
"$RUN" -n 1 /no/such/program 2> "$tmp/err3"
grep -q "cannot run /no/such/program" "$tmp/err3" || { echo "FAIL: no message for a missing program"; exit 1; }
echo "bagua-run failure handling: ok"
