# pjw — the process jail warden. `make demo` and `make test` do all the set-up on a fresh
# Debian 12 machine (run as root: pjw manages cgroups).
CARGO ?= cargo
PREFIX ?= /usr/local
DESTDIR ?=

.PHONY: all deps build release spank gen deb test-deb demo test test-host test-vm test-vm-v1 test-vm-build test-vm-selfcheck test-vm-systemd bench-vm-numa test-fuzz test-unit test-root bench bench-quick bench-central bench-alloc chaos lint install uninstall clean

all: release

deps:
	@scripts/install-deps.sh

build: deps
	$(CARGO) build --workspace --bins
	@$(MAKE) --no-print-directory spank

release: deps
	$(CARGO) build --release --workspace --bins
	@$(MAKE) --no-print-directory spank

# The Slurm SPANK plugin (packaging/slurm/spank/pjw_spank.c, docs/wlm/slurm.md), built against
# the installed Slurm's <slurm/spank.h> and json-c (libslurm-dev, libjson-c-dev: installed by
# scripts/install-deps.sh). Where they are missing (the test guests) it is skipped with a line.
SPANK_SO = target/spank/pjw_spank.so
SPANK_CFLAGS = -O2 -g -fPIC -Wall -Wextra -Werror -D_FORTIFY_SOURCE=2 -fstack-protector-strong
SPANK_LDFLAGS = -shared -Wl,-z,relro,-z,now -Wl,--as-needed
spank:
	@if printf '#include <slurm/spank.h>\n#include <json-c/json.h>\n' | $(CC) -fsyntax-only -x c - 2>/dev/null; then \
	  $(MAKE) --no-print-directory $(SPANK_SO); \
	else echo "spank: skipped: no <slurm/spank.h> or <json-c/json.h> (apt install libslurm-dev libjson-c-dev)"; fi

$(SPANK_SO): packaging/slurm/spank/pjw_spank.c
	@mkdir -p $(@D)
	$(CC) $(SPANK_CFLAGS) $(SPANK_LDFLAGS) -o $@ $< -ljson-c

# Build, start a private daemon, run the demonstration, stop the daemon, leave nothing behind but
# its figures: a new bench/results/<date>T<time>Z-demo.md (README's demo table is generated from
# the latest one by scripts/bench-readme.sh).
demo: release
	scripts/demo.sh

# Everything (scripts/test-all.sh): the host tier — unit, property and fake-tree tests, root tests
# on the real cgroupfs (each below the test's own cgroup or its delegated scope, removed even when
# a test fails), live Slurm, Grid Engine, PostgreSQL — then the guests: busybox with pure cgroup
# v2 and 2 NUMA nodes, busybox with pure v1, Debian 12 with systemd; then the self-checks. Each
# tier ends "TIER: N passed, M failed, K skipped" with its skips' reasons; a grand total closes.
test: build
	scripts/wlm/install.sh
	scripts/test-all.sh

test-host: build
	scripts/wlm/install.sh
	TEST_TIERS=host scripts/test-all.sh

# The VM tier: the host build's test executables run in a qemu guest with pure cgroup v2 and two NUMA
# nodes (vm/vmtest.sh; kernel and initramfs cached in /var/tmp/pjw-vm, one log per run).
# VM_INJECT_FAILURE=1 makes one guest test fail (the tier must then fail).
VM_BINS ?= target/vm/share
# A bound for a hung guest, not a timing: a full busybox tier ran 700-900 s under software
# emulation on the shared 2-CPU test machine (load average up to 17 with other builds and guests).
VM_TIMEOUT ?= 1800
VM_INJECT_FAILURE ?= 0
export VM_TIMEOUT

test-vm-build: deps
	vm/build.sh $(VM_BINS)

test-vm: test-vm-build
	VM_INJECT_FAILURE=$(VM_INJECT_FAILURE) vm/vmtest.sh $(VM_BINS)

# The same executables in a guest with pure cgroup v1 (legacy mode: the v1 hierarchies only, no
# cgroup2); summary line "VM-busybox-v1: N passed, M failed, K skipped".
test-vm-v1: test-vm-build
	VM_CGROUP=v1 VM_INJECT_FAILURE=$(VM_INJECT_FAILURE) vm/vmtest.sh $(VM_BINS)

# A deliberately failing guest test must fail the tier.
test-vm-selfcheck: test-vm-build
	vm/selfcheck.sh $(VM_BINS)

# The systemd guest tier (vm/systemd/run.sh): a Debian 12 guest with systemd as PID 1 and pure
# cgroup v2 (image built once by vm/systemd/build-image.sh, cached in /var/tmp/pjw-vm/systemd);
# over ssh logins as root: make demo, every test executable, the packaged service with two users'
# jobs through daemon-reload/restart/stop+start, a slice with AllowedCPUs=, and the Debian
# package of make deb (apt install, pjw check, reload, an upgrade with a job running, purge).
test-vm-systemd: deps
	vm/systemd/run.sh

test-unit: build
	$(CARGO) test --workspace --lib

# Fuzz the protocol decoder and the WLM parsers (fuzz/, scripts/fuzz.sh): every seed of
# fuzz/corpus/ replayed, then FUZZ_SECONDS (15) of libFuzzer per target; a crash fails and its
# input is kept in fuzz/artifacts/. Ends "fuzz: N passed, M failed, 0 skipped".
FUZZ_SECONDS ?= 15
test-fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz.sh

# The benchmark suite (bench/run.sh): every scenario beside the alternatives a user would pick
# (plain Linux, taskset, a FIFO runner, nice/chrt -i, one memory cgroup, srun on a live Slurm),
# a table and a new bench/results/<date>T<time>Z.md (never overwritten) with the machine's load
# and plots; a run on a loaded machine is marked NOT PUBLISHABLE. scripts/bench-readme.sh puts
# the latest full file's table (and the latest demo file's) in README; scripts/readme-check.sh, in
# make test, checks every README figure against the results files. SCENARIO=name runs one (make bench SCENARIO=isolation).
# Root; cgroups only below the bench's own cgroup, removed even on failure. Not part of make test.
SCENARIO ?=
bench: deps
	bench/setup.sh
	bench/run.sh $(SCENARIO)

# The same in under 5 minutes on an idle machine: fewer rounds, shorter workloads; it writes a
# bench/results/<date>T<time>Z-quick.md of its own.
bench-quick: deps
	bench/setup.sh
	bench/run.sh --quick $(SCENARIO)

# The load of a big cluster on one PostgreSQL (bench/scenarios/central.sh): 2,000 simulated nodes
# with their running jobs at the default sampling ship through pjw's own shipping pass (TLS,
# short-lived connections, batched upserts) into a private PostgreSQL; rows/s, backlog,
# connections, ship latency, sizes after retention, the cluster queries' latency. Writes
# bench/results/<date>T<time>Z-central.md (never overwritten; marked when the machine is loaded).
# About 17 minutes (7 days of history filed, then two 5-minute runs). Not part of make bench.
bench-central: deps
	BENCH_SAVE=1 bench/run.sh central

# The NUMA-spanning thread balancing bench (bench/scenarios/bind-numa.sh) where it can run: in the
# systemd guest (16 vCPUs in two NUMA nodes, software emulation), which writes its results file
# into this tree's bench/results/ (never overwritten). Release build on the host only.
bench-vm-numa: deps
	vm/systemd/run.sh session bench-numa

# Chaos (scripts/chaos.sh): CHAOS_CYCLES (1000) job cycles of mixed sizes, queued, preempting and
# backfill-only, while the daemon is kill -9'd and restarted at random (seed printed); checks the
# node all along (every 100 ms and after every restart) that no CPU is in two running or ending
# jobs and every job runs confined (a cpuset the kernel shows, in the pool) or has ended, then that
# every client got its job's exit status (pjw's error only where the test asked for a refusal) and
# no cgroup is left; scripts/chaos-selfcheck.sh checks that a lost exit status fails it. Figures into
# bench/results/chaos-<date>T<time>.md. `make test` runs the same test with 100 cycles. Root.
CHAOS_CYCLES ?= 1000
chaos: build
	PJW_CHAOS_CYCLES=$(CHAOS_CYCLES) scripts/chaos.sh

bench-alloc: deps
	$(CARGO) bench -p pjw-topology --bench alloc

# The house checks (scripts/house-check.py, decisions (cg), (ch)): docs/architecture.md's file
# list in step with the tree, no non-test function over 100 lines nor file over 600 (all enforced;
# HOUSE_ENFORCE=0 only lists the sizes).
HOUSE_ENFORCE ?= 1
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	scripts/house-check.py $(if $(filter 1,$(HOUSE_ENFORCE)),--enforce)
	# The fuzz targets are outside the workspace: checked here so a change to what they
	# include (wlm_parse.rs, the protocol) or a stale fuzz/Cargo.lock fails lint, not CI.
	$(CARGO) check --locked --manifest-path fuzz/Cargo.toml --target-dir fuzz/target --bins

# Man pages (pjw(1), pjw-SUBCOMMAND(1), pjw.toml(5)) and bash, zsh and fish completions, made by
# the binary from its own clap definition (`pjw generate`, docs/decisions.md (ag)).
GEN = target/gen
gen: release
	rm -rf $(GEN)
	target/release/pjw generate man $(GEN)/man
	for sh in bash zsh fish; do target/release/pjw generate completions $$sh --dir $(GEN)/completions >/dev/null || exit 1; done

install: release gen
	install -D -m 0755 target/release/pjw $(DESTDIR)$(PREFIX)/bin/pjw
	install -D -m 0755 target/release/pjw-full $(DESTDIR)$(PREFIX)/lib/pjw/pjw-full
	install -D -m 0644 -t $(DESTDIR)$(PREFIX)/share/man/man1 $(GEN)/man/*.1
	install -D -m 0644 -t $(DESTDIR)$(PREFIX)/share/man/man5 $(GEN)/man/*.5
	install -D -m 0644 $(GEN)/completions/pjw.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/pjw
	install -D -m 0644 $(GEN)/completions/_pjw $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_pjw
	install -D -m 0644 $(GEN)/completions/pjw.fish $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/pjw.fish
	install -D -m 0644 packaging/pjw.service $(DESTDIR)/etc/systemd/system/pjw.service
	install -D -m 0644 packaging/pjw.slice $(DESTDIR)/etc/systemd/system/pjw.slice
	install -D -m 0755 scripts/pjw-scope $(DESTDIR)$(PREFIX)/lib/pjw/pjw-scope
	install -D -m 0644 README.md $(DESTDIR)$(PREFIX)/share/doc/pjw/README.md
	install -D -m 0755 -t $(DESTDIR)$(PREFIX)/lib/pjw/slurm packaging/slurm/pjw-prolog.sh packaging/slurm/pjw-epilog.sh packaging/slurm/pjw-task-prolog.sh
	install -D -m 0644 -t $(DESTDIR)$(PREFIX)/lib/pjw/slurm packaging/slurm/slurm.conf packaging/slurm/cgroup.conf packaging/slurm/plugstack.conf
	@if [ -f $(SPANK_SO) ]; then install -D -m 0644 $(SPANK_SO) $(DESTDIR)$(PREFIX)/lib/pjw/slurm/pjw_spank.so; \
	 else echo "not installing the Slurm SPANK plugin: not built here (see make spank)"; fi
	install -D -m 0755 -t $(DESTDIR)$(PREFIX)/lib/pjw/sge packaging/sge/pjw-shepherd.sh
	install -D -m 0755 packaging/lsf/pjw-job-starter $(DESTDIR)$(PREFIX)/lib/pjw/lsf/pjw-job-starter
	install -D -m 0755 packaging/condor/pjw-job-wrapper $(DESTDIR)$(PREFIX)/lib/pjw/condor/pjw-job-wrapper
	install -D -m 0644 packaging/pbs/pjw_hook.py $(DESTDIR)$(PREFIX)/lib/pjw/pbs/pjw_hook.py
	install -D -m 0644 packaging/pam/pjw-adopt $(DESTDIR)/etc/pam.d/pjw-adopt
	sed -i 's#/usr/local/bin/pjw#$(PREFIX)/bin/pjw#' $(DESTDIR)/etc/pam.d/pjw-adopt
	@if [ ! -e $(DESTDIR)/etc/pjw/pjw.toml ]; then install -D -m 0600 packaging/pjw.toml $(DESTDIR)/etc/pjw/pjw.toml; \
	 else echo "keeping existing $(DESTDIR)/etc/pjw/pjw.toml"; fi
	@echo "installed; with systemd: systemctl daemon-reload && systemctl enable --now pjw"

# The Debian package (scripts/build-deb.sh, dpkg-deb; docs/decisions.md (ah)):
# target/deb/pjw_VERSION-1_ARCH.deb. test-deb checks its contents and runs lintian (no errors).
deb: release
	scripts/build-deb.sh

test-deb: deb
	scripts/deb-test.sh

# Jobs still running in pjw-jobs.scope (pure v2 under systemd) are left alone: stop them first
# (`systemctl stop pjw-jobs.scope` kills them).
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/pjw $(DESTDIR)/etc/systemd/system/pjw.service $(DESTDIR)/etc/systemd/system/pjw.slice
	rm -rf $(DESTDIR)$(PREFIX)/lib/pjw $(DESTDIR)$(PREFIX)/share/doc/pjw
	@if grep -qs '^[^#]*pjw-adopt' $(DESTDIR)/etc/pam.d/sshd; then echo "note: /etc/pam.d/sshd includes pjw-adopt: take it out (every login but root's fails without pjw)"; fi
	rm -f $(DESTDIR)/etc/pam.d/pjw-adopt
	rm -f $(DESTDIR)$(PREFIX)/share/man/man1/pjw.1 $(DESTDIR)$(PREFIX)/share/man/man1/pjw-*.1 $(DESTDIR)$(PREFIX)/share/man/man5/pjw.toml.5
	rm -f $(DESTDIR)$(PREFIX)/share/bash-completion/completions/pjw $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_pjw $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/pjw.fish

clean:
	$(CARGO) clean
