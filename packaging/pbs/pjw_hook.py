"""pjw hook for PBS Professional / OpenPBS: every job's processes on this node run in a pjw set.

Events (one hook, three events; see docs/wlm/pbs.md):
  execjob_begin   root, before the job starts on a node: check that the node's pjw daemon
                  answers; reject the job otherwise (it would run unconfined).
  execjob_launch  root, just before MoM starts the job's program as the user: put
                  `pjw run --from-env pbs -c N -m BYTES --` in front of it. MoM then
                  execs pjw as the job's user; pjw asks the daemon for N CPUs as job
                  `pbs:ID`, is moved into the job's cgroups and execs the original program
                  (same process).
  execjob_end     root, after the job: `pjw kill` its pjw job in case processes are left.

The job's pjw id is `pbs:ID` (PBS's namespace: no id a user picks with `pjw run --job-id` is
one), or `pbs:ID_uUID` when another user's job already claimed `pbs:ID` (a forged PBS_JOBID):
the hook finds the job by its manager label and its owner, never by the id alone, so a user who
claims a victim's id first neither stops the victim's job nor makes it run unwrapped.

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


def pjw_jobs_of(job):
    """The pjw ids of the live jobs of PBS job `job` on this node: those pjw runs with the
    manager label `pbs:ID` for the job's own user (euser). None when pjw does not answer."""
    r = pjw("status", "--json")
    if r.returncode != 0:
        return None
    label = "pbs:%s" % job.id
    return [j["id"] for j in json.loads(r.stdout).get("jobs", [])
            if j.get("wlm") == label and j.get("user") == job.euser]


def begin(e):
    r = pjw("status", "--json")
    if r.returncode != 0:
        msg = "pjw daemon not answering on %s: %s" % (pbs.get_local_nodename(), r.stderr.strip())
        if CONFIG.get("require_daemon", True):
            e.reject(msg)
        log(msg)


def launch(e):
    job = e.job
    jid = job.id
    if pjw_jobs_of(job):
        # Another task of the user's job that already runs here (pbs_attach, tm_spawn): it is
        # left to pjw's adoption rules (PBS_JOBID, the owner's own job), not given a second set.
        log("job %s already runs under pjw here; task not wrapped" % jid)
        return
    cpus, mem = requested(job)
    # The id comes from PBS_JOBID in the job's environment (MoM sets it): pbs:ID.
    argv = [CONFIG["pjw"], "run", "--quiet", "--from-env", "pbs"]
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
    for jid in pjw_jobs_of(e.job) or []:
        r = pjw("kill", jid)
        log("job %s: pjw kill %s: %s" % (e.job.id, jid, (r.stderr or r.stdout).strip()))


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
