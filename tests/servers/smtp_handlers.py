"""aiosmtpd handlers for the tests, used as `python3 -m aiosmtpd -n -l HOST:PORT -c smtp_handlers.NAME ARG`.

Recording(FILE): accepts every message and appends it to FILE as one JSON line.
Refusing(FILE): refuses every recipient with 550 (a permanent error), recording the attempt.
Slow(FILE): accepts, but answers the message data only after 30 s.
"""

import asyncio
import json


class Recording:
    def __init__(self, record):
        self.record = record

    @classmethod
    def from_cli(cls, parser, *args):
        if len(args) != 1:
            parser.error(f"{cls.__name__} takes the record file as its one argument")
        return cls(args[0])

    def write(self, entry):
        with open(self.record, "a", encoding="utf-8") as out:
            out.write(json.dumps(entry) + "\n")

    async def handle_DATA(self, server, session, envelope):
        self.write({
            "mail_from": envelope.mail_from,
            "rcpt_tos": envelope.rcpt_tos,
            "data": envelope.content.decode("utf-8", "replace"),
        })
        return "250 Message accepted for delivery"


class Refusing(Recording):
    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        self.write({"refused": address})
        return "550 5.1.1 mailbox unavailable"


class Slow(Recording):
    async def handle_DATA(self, server, session, envelope):
        await asyncio.sleep(30)
        return await super().handle_DATA(server, session, envelope)
