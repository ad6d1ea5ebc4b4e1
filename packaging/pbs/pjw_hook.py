"""pjw hook for PBS Professional / OpenPBS: every job's processes on this node run in a pjw set.

Events (one hook, three events; see docs/wlm/pbs.md):
  execjob_begin   root, before the job starts on a node: check that the node's pjw daemon
                  answers; reject the job otherwise (it would run unconfined).
  execjob_launch  root, just before MoM starts the job's program as the user: put
                  `pjw run --from-env pbs -j ID -c N -m BYTES --` in front of it. MoM then
                  execs pjw as the job's user; pjw asks the daemon for N CPUs, is moved into
                  the job's cgroups and execs the original program (same process).
  execjob_end     root, after the job: `pjw kill ID` in case processes are left.

Install:
  qmgr -c "create hook pjw event='execjob_begin,execjob_launch,execjob_end'"
  qmgr -c "import hook pjw application/x-python default pjw_hook.py"
  qmgr -c "import hook pjw application/x-config default pjw_hook.json"   # optional
The optional JSON config: {"pjw": "/usr/local/bin/pjw", "socket": "/run/pjw/pjw.sock",
"tmp": "1G", "require_daemon": true}.
"""

import json
import os
import re
import subprocess

import pbs

CONFIG = {"pjw": "/usr/local/bin/pjw", "socket": None, "tmp": None, "require_daemon": True}

UNITS = {"": 1, "b": 1, "w": 8, "kb": 1 << 10, "kw": 8 << 10, "mb": 1 << 20, "mw": 8 << 20,
         "gb": 1 << 30, "gw": 8 << 30, "tb": 1 << 40, "tw": 8 << 40}


def log(msg):
    pbs.logmsg(pbs.LOG_DEBUG, "pjw hook: %s" % msg)


def load_config():
    if getattr(pbs, "hook_config_filename", None):
        with open(pbs.hook_config_filename) as f:
            CONFIG.update(json.load(f))


def pbs_bytes(value):
    """A PBS size ('4gb', '512mb', '1048576kb', '2w') in bytes, or None."""
    if value is None:
        return None
    m = re.match(r"^\s*(\d+)\s*([kmgt]?[bw]?)\s*$", str(value).lower())
    if not m or m.group(2) not in UNITS:
        return None
    return int(m.group(1)) * UNITS[m.group(2)]


def short(host):
    return host.split(".")[0]


def local_share(job):
    """(cpus, bytes) of the job's chunks on this host, from exec_vnode
    '(n1:ncpus=4:mem=4gb)+(n2:ncpus=2)'; None for what it does not say."""
    here = short(pbs.get_local_nodename())
    cpus = mem = None
    ev = str(getattr(job, "exec_vnode", "") or "")
    for chunk in ev.split("+"):
        parts = chunk.strip().strip("()").split(":")
        if not parts or short(re.sub(r"\[.*\]$", "", parts[0])) != here:
            continue
        for kv in parts[1:]:
            k, _, v = kv.partition("=")
            if k == "ncpus":
                cpus = (cpus or 0) + int(v)
            elif k == "mem" and pbs_bytes(v) is not None:
                mem = (mem or 0) + pbs_bytes(v)
    return cpus, mem


def requested(job):
    """(cpus, bytes) on this host: its exec_vnode chunks, else the job's Resource_List."""
    cpus, mem = local_share(job)
    rl = job.Resource_List
    if cpus is None and rl["ncpus"] is not None:
        cpus = int(rl["ncpus"])
    if mem is None:
        mem = pbs_bytes(rl["mem"])
    return cpus, mem


def pjw(*args):
    env = dict(os.environ)
    if CONFIG.get("socket"):
        env["PJW_SOCKET"] = CONFIG["socket"]
    return subprocess.run([CONFIG["pjw"]] + list(args), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)


def pjw_job_id(job_id):
    out = re.sub(r"[^A-Za-z0-9._-]", "_", job_id.replace("[", ".").replace("]", ""))
    return out.lstrip(".-")[:64] or "job"


def live_here(job_id):
    r = pjw("status", "--json")
    if r.returncode != 0:
        return None
    return any(j["id"] == job_id for j in json.loads(r.stdout).get("jobs", []))


def begin(e):
    r = pjw("status", "--json")
    if r.returncode != 0:
        msg = "pjw daemon not answering on %s: %s" % (pbs.get_local_nodename(), r.stderr.strip())
        if CONFIG.get("require_daemon", True):
            e.reject(msg)
        log(msg)


def launch(e):
    job = e.job
    jid = pjw_job_id(job.id)
    if live_here(jid):
        # Another task of a job that already runs here (pbs_attach, tm_spawn): it is left to
        # pjw's adoption rules (PBS_JOBID), not given a second set.
        log("job %s already runs under pjw here; task not wrapped" % jid)
        return
    cpus, mem = requested(job)
    argv = [CONFIG["pjw"], "run", "--quiet", "--from-env", "pbs", "--job-id", jid]
    if cpus:
        argv += ["--cpus", str(cpus)]
    if mem:
        argv += ["--mem", str(mem)]
    if CONFIG.get("tmp"):
        argv += ["--tmp", str(CONFIG["tmp"])]
    # pjw execs argv after `--` with the program MoM would have started.
    argv += ["--", e.progname] + list(e.argv[1:])
    e.progname = CONFIG["pjw"]
    e.argv = argv
    if CONFIG.get("socket"):
        e.env["PJW_SOCKET"] = CONFIG["socket"]
    log("job %s launched under pjw: %d cpus, %s bytes" % (jid, cpus or 0, mem))


def end(e):
    jid = pjw_job_id(e.job.id)
    if live_here(jid):
        r = pjw("kill", jid)
        log("job %s: pjw kill: %s" % (jid, (r.stderr or r.stdout).strip()))


def main():
    e = pbs.event()
    try:
        load_config()
        if e.type == pbs.EXECJOB_BEGIN:
            begin(e)
        elif e.type == pbs.EXECJOB_LAUNCH:
            launch(e)
        elif e.type == pbs.EXECJOB_END:
            end(e)
    except SystemExit:
        raise
    except Exception as exc:  # a hook that raises makes MoM fail the event; say why
        e.reject("pjw hook: %s" % exc)
    e.accept()


main()
