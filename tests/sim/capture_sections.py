"""Parse capture files made of `# $ nvidia-smi ...` sections (exporter format and ours)."""
import collections
import re

Section = collections.namedtuple("Section", "cmd lines rc")
_BAR = "#" * 80


def sections(path):
    """Return [Section(cmd, lines, rc)] for every `# $ nvidia-smi ...` block of a capture file.

    ``cmd`` is the command without the leading ``$ ``, stripped; ``lines`` the output lines
    (trailing blank lines removed); ``rc`` the exit code where the capture recorded one
    (our captures end a block with ``# rc=N``), else None.
    """
    with open(path, encoding="utf-8", errors="replace") as fh:
        lines = fh.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("# $ nvidia-smi"):
            cmd = line[4:].strip()
            j = i + 1
            while j < len(lines) and lines[j] == _BAR:
                j += 1
            k = j
            while k < len(lines) and lines[k] != _BAR and not lines[k].startswith("# $ nvidia-smi"):
                k += 1
            body = lines[j:k]
            rc = None
            while body and body[-1] == "":
                body.pop()
            if body and re.match(r"^# rc=\d+$", body[-1]):
                rc = int(body[-1][5:])
                body.pop()
            out.append(Section(cmd, body, rc))
            i = k
        else:
            i += 1
    return out
