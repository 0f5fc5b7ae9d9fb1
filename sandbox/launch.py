"""Drop root privileges, then exec a command (stdlib only).

    python -I -S launch.py UID GID -- COMMAND...

Used by ``rewardlab.sandbox`` when the trainer runs as root: untrusted code must never run as
real root (RLIMIT_NPROC is not enforced for uid 0), and the trainer itself is never forked, so
this small program does the ``setgroups/setresgid/setresuid`` dance and then ``execv``s
bubblewrap (tier A) or the fork server (tier B).
"""

import os
import sys


def main() -> None:
    uid, gid = int(sys.argv[1]), int(sys.argv[2])
    if sys.argv[3] != "--" or len(sys.argv) < 5:
        sys.exit("usage: launch.py UID GID -- COMMAND...")
    if uid == 0:
        sys.exit("launch.py: refusing to run the sandbox as root")
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        sys.exit("launch.py: could not drop root privileges")
    os.chdir("/")
    os.execv(sys.argv[4], sys.argv[4:])


if __name__ == "__main__":
    main()
