#!/bin/sh
# Inside a throwaway node-image container: the image's Alertmanager with a rendered config
# whose relay is relay.example.org:2525 and whose webhook is http://hooks.example.org:8099/hook
# (both names the container resolves to its loopback); an SMTP
# sink and an HTTP sink stand in for them. One alert goes in; both sinks must get it.
set -u
python3 -u /smtp_sink.py 2525 > /tmp/mail 2>&1 &
python3 -u - > /tmp/hook.log 2>&1 <<'PY' &
import http.server
class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with open("/tmp/hook", "ab") as f:
            f.write(body + b"\n")
        self.send_response(200)
        self.end_headers()
http.server.HTTPServer(("127.0.0.1", 8099), Hook).serve_forever()
PY
prometheus-alertmanager --config.file=/etc/prometheus/alertmanager.yml --storage.path=/tmp/am \
    --web.listen-address=127.0.0.1:9093 --cluster.listen-address= > /tmp/am.log 2>&1 &
for i in $(seq 100); do curl -sf http://127.0.0.1:9093/-/ready > /dev/null && break; sleep 0.2; done
amtool --alertmanager.url=http://127.0.0.1:9093 alert add SlurmNodeDown node=t-cpu-01 pool=cpu \
    severity=critical --annotation=summary="t-cpu-01 (cpu) is DOWN in Slurm"
for i in $(seq 150); do
    grep -q SlurmNodeDown /tmp/hook 2>/dev/null && grep -q SlurmNodeDown /tmp/mail && break
    sleep 0.2
done
echo "== webhook"; cat /tmp/hook 2>/dev/null
echo "== mail"; cat /tmp/mail
echo "== alertmanager"; tail -5 /tmp/am.log
