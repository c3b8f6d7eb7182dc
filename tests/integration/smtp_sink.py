"""An SMTP sink for the mail tests, run inside a node-image container: accepts every
message on 127.0.0.1:<port> and prints each line of its data as a bytes literal
(b'To: alice@example.org'). Python 3.12 removed the smtpd module the tests used before."""

import socketserver
import sys


class Session(socketserver.StreamRequestHandler):
    def reply(self, text: str) -> None:
        self.wfile.write(text.encode() + b"\r\n")
        self.wfile.flush()

    def handle(self) -> None:
        self.reply("220 sink ESMTP")
        in_data = False
        for raw in self.rfile:
            line = raw.rstrip(b"\r\n")
            if in_data:
                if line == b".":
                    in_data = False
                    self.reply("250 queued")
                else:
                    print(repr(line), flush=True)
                continue
            command = line.split(b" ", 1)[0].upper()
            if command in (b"EHLO", b"HELO"):
                self.reply("250 sink")
            elif command == b"DATA":
                in_data = True
                self.reply("354 end with <CRLF>.<CRLF>")
            elif command == b"QUIT":
                self.reply("221 bye")
                return
            else:
                self.reply("250 ok")


socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer(("127.0.0.1", int(sys.argv[1])), Session).serve_forever()
