# Shell helpers shared by the scripts of benches/ (sourced, not run).

# A free TCP port on the loopback interface.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits (up to a minute) until something listens on loopback port $1.
wait_port() {
  for _ in $(seq 1 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}

# The requests wrk completed, from the JSON line ../shared/perf/lib/wrk_post.lua prints (wrk's
# output on stdin); fails when any request failed.
wrk_requests() {
  python3 -c 'import json,sys
for line in sys.stdin:
    line=line.strip()
    if line.startswith("{") and "requests" in line:
        d=json.loads(line); e=d["errors"]
        if sum(e.values()): sys.exit("errors: %r" % e)
        print(d["requests"])'
}
