#!/usr/bin/env python3
"""Ctrl-C on a terminal, as a user presses it: the ^C byte written to a pty, whose line
discipline sends SIGINT to the foreground program.

  generate: stops generating, prints the stats and a final newline, exits 130.
  chat:     the first ^C ends only the reply in progress (the next turn works); a ^C at
            the prompt ends the session.
Usage: pty_sigint.py DSV4_BIN MODEL_DIR"""
import os
import pty
import select
import sys
import time


def spawn(argv):
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(argv[0], argv)
    return pid, fd


def read_until(fd, needle, timeout):
    """Reads from the pty until needle (bytes) appears; returns everything read."""
    out = b""
    end = time.time() + timeout
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.2)
        if not r:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
        if needle in out:
            break
    return out


def wait_exit(pid, fd, timeout):
    """Drains the pty and waits for the child; returns (exit status, output), or kills it."""
    out = b""
    end = time.time() + timeout
    while time.time() < end:
        out += read_until(fd, b"\0never\0", 0.3)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            out += read_until(fd, b"\0never\0", 0.3)
            return os.waitstatus_to_exitcode(status), out
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None, out


def fail(msg, out=b""):
    sys.stderr.write("FAIL: %s\n%s\n" % (msg, out.decode("utf-8", "replace")[-2000:]))
    sys.exit(1)


def check_generate(bin_, model):
    # -n -1: it would run until the context is full; ^C must end it early
    pid, fd = spawn([bin_, "generate", "--model", model, "-p", "Hello", "-n", "-1",
                     "--max-context", "100000", "--temperature", "0.8"])
    out = read_until(fd, b"first", 0.0)  # nothing yet
    # wait for streamed text (the first bytes after the model loads)
    t0 = time.time()
    while time.time() - t0 < 60 and len(out) < 40:
        out += read_until(fd, b"\0never\0", 0.5)
    if len(out) < 40:
        os.kill(pid, 9)
        fail("generate printed nothing to interrupt", out)
    os.write(fd, b"\x03")
    code, rest = wait_exit(pid, fd, 30)
    out += rest
    if code is None:
        fail("generate did not stop after ^C", out)
    if code != 130:
        fail("generate exit status %s after ^C (want 130)" % code, out)
    if b"interrupted" not in out or b"generated:" not in out:
        fail("generate printed no stats after ^C", out)
    if not out.rstrip(b" ").endswith(b"\n"):
        fail("generate output does not end with a newline", out)


def main():
    bin_, model = sys.argv[1], sys.argv[2]
    check_generate(bin_, model)
    check_chat(bin_, model)
    print("pty_sigint: generate and chat stop on ^C as described")


def check_chat(bin_, model):
    pid, fd = spawn([bin_, "chat", "--model", model, "-n", "-1", "--max-context", "100000",
                     "--no-warmup", "--temperature", "0.8"])
    out = read_until(fd, b"> ", 60)
    if b"> " not in out:
        os.kill(pid, 9)
        fail("chat shows no prompt", out)
    os.write(fd, b"Tell me a story\r")
    t0 = time.time()
    got = b""
    while time.time() - t0 < 60 and len(got) < 60:
        got += read_until(fd, b"\0never\0", 0.5)
    out += got
    os.write(fd, b"\x03")  # ends the reply only
    out += read_until(fd, b"> ", 30)
    if not out.endswith(b"> ") and b"\n> " not in out[-200:]:
        os.kill(pid, 9)
        fail("chat did not come back to its prompt after ^C during a reply", out)
    done, _ = os.waitpid(pid, os.WNOHANG)
    if done:
        fail("chat ended on a ^C during a reply", out)
    os.write(fd, b"/help\r")
    more = read_until(fd, b"/reset", 10)
    out += more
    if b"/reset" not in more:
        os.kill(pid, 9)
        fail("chat no longer answers after an interrupted reply", out)
    out += read_until(fd, b"> ", 10)
    os.write(fd, b"\x03")  # at the prompt: ends the session
    code, rest = wait_exit(pid, fd, 30)
    out += rest
    if code is None:
        fail("chat did not end on ^C at its prompt", out)
    if code not in (0, 130):
        fail("chat exit status %s after ^C at the prompt" % code, out)


if __name__ == "__main__":
    main()
