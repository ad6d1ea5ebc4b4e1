/*
 * pjw_spank.so: pjw's Slurm SPANK plugin. Every task slurmstepd starts (srun steps and the
 * batch script) joins its pjw job before its first instruction.
 *
 * In slurm_spank_task_init_privileged, which Slurm calls in the task's own process after fork,
 * as root, before it drops privileges and execs, the plugin asks the pjw daemon to move the
 * calling process into the job's cgroups (request `slurm_task`, docs/api.md). The daemon
 * decides from the kernel's facts about the caller (root, a direct child of a root
 * `slurmstepd: [JOB.STEP]` of a registered `slurm:JOB`), never from the request, which names
 * no job. It answers with the job's CPUs and variables; in slurm_spank_task_init (the same
 * process, after Slurm set its own GPU variables) the plugin sets them in the task's
 * environment: the GPU variables over Slurm's, the thread counts (OMP_NUM_THREADS, …) only
 * where the user has not set them (see "Thread variables" in docs/wlm/slurm.md).
 *
 * plugstack.conf (docs/wlm/slurm.md):
 *   required /usr/lib/pjw/slurm/pjw_spank.so [socket=/run/pjw/pjw.sock] [timeout=10]
 * `required`: a task that cannot join (no daemon, a refusal) fails instead of running outside
 * its jail. `optional`: it runs, and the daemon's adoption by exec events moves it after exec.
 *
 * Built by `make spank` against the installed Slurm's <slurm/spank.h> and json-c.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <json-c/json.h>
#include <slurm/spank.h>

SPANK_PLUGIN(pjw, 1);

#define PJW_DEFAULT_SOCKET "/run/pjw/pjw.sock"
/* The protocol's frame limit (pjw_proto::MAX_FRAME) and version. */
#define PJW_MAX_FRAME (1u << 20)
#define PJW_PROTO_VERSION 1
#define PJW_MAX_VARS 64
#define PJW_MAX_NAME 128
#define PJW_MAX_VALUE 4096
/* Most names the request lists (pjw_proto::slurm_task::MAX_SET_NAMES). */
#define PJW_MAX_SET 4096
/* The variable naming the thread variables pjw set (NAME=VALUE, space-separated), so that a
 * step inside a job script tells pjw's values (replaced) from the user's own (kept). */
#define PJW_MARK "PJW_THREAD_ENV"

struct var {
	char *name;
	char *value;
};

static char sock_path[sizeof(((struct sockaddr_un *)0)->sun_path)] = PJW_DEFAULT_SOCKET;
static int timeout_s = 10;

/* The daemon's answer, kept from task_init_privileged to task_init: both run in the task's
 * own process (forked per task), so this is that task's alone. */
static int joined;
static char job[128];
static struct var over[PJW_MAX_VARS];     /* set over what is there (GPUs) */
static int n_over;
static struct var defaults[PJW_MAX_VARS]; /* set where the user has not (threads) */
static int n_defaults;

static int parse_args(int ac, char **av)
{
	for (int i = 0; i < ac; i++) {
		if (strncmp(av[i], "socket=", 7) == 0) {
			const char *p = av[i] + 7;
			if (p[0] != '/' || strlen(p) >= sizeof(sock_path)) {
				slurm_error("pjw: plugstack.conf: socket=%s: not an absolute path of at most %zu bytes",
					    p, sizeof(sock_path) - 1);
				return -1;
			}
			strcpy(sock_path, p);
		} else if (strncmp(av[i], "timeout=", 8) == 0) {
			char *end;
			long t = strtol(av[i] + 8, &end, 10);
			if (*end || t < 1 || t > 600) {
				slurm_error("pjw: plugstack.conf: %s: timeout is whole seconds, 1-600", av[i]);
				return -1;
			}
			timeout_s = (int)t;
		} else {
			slurm_error("pjw: plugstack.conf: unknown argument \"%s\" (socket=PATH, timeout=SECONDS)",
				    av[i]);
			return -1;
		}
	}
	return 0;
}

/* Arguments are checked wherever Slurm loads the plugin (srun, sbatch, slurmstepd), so a typo
 * in plugstack.conf shows at once. */
int slurm_spank_init(spank_t sp, int ac, char **av)
{
	(void)sp;
	return parse_args(ac, av);
}

static int write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static int read_all(int fd, char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = read(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* One request frame out, one answer frame back (4-byte big-endian length, JSON). The answer
 * is returned NUL-terminated (free it), or NULL with `why` set. */
static char *ask_daemon(const char *req, char *why, size_t why_len)
{
	struct sockaddr_un addr = { .sun_family = AF_UNIX };
	struct timeval tv = { .tv_sec = timeout_s };
	unsigned char len[4];
	uint32_t n = (uint32_t)strlen(req);
	char *answer = NULL;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0) {
		snprintf(why, why_len, "socket: %s", strerror(errno));
		return NULL;
	}
	strcpy(addr.sun_path, sock_path);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		snprintf(why, why_len, "cannot connect to the pjw daemon at %s: %s", sock_path,
			 strerror(errno));
		goto out;
	}
	len[0] = n >> 24;
	len[1] = n >> 16;
	len[2] = n >> 8;
	len[3] = n;
	if (write_all(fd, (char *)len, 4) < 0 || write_all(fd, req, n) < 0) {
		snprintf(why, why_len, "cannot send to the pjw daemon: %s", strerror(errno));
		goto out;
	}
	errno = 0;
	if (read_all(fd, (char *)len, 4) < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			snprintf(why, why_len, "no answer from the pjw daemon within %d s (timeout=)",
				 timeout_s);
		else
			snprintf(why, why_len, "no answer from the pjw daemon: %s",
				 errno ? strerror(errno) : "it closed the connection");
		goto out;
	}
	n = (uint32_t)len[0] << 24 | (uint32_t)len[1] << 16 | (uint32_t)len[2] << 8 | len[3];
	if (n == 0 || n > PJW_MAX_FRAME) {
		snprintf(why, why_len, "the pjw daemon sent a frame of %u bytes", n);
		goto out;
	}
	answer = malloc(n + 1);
	if (!answer) {
		snprintf(why, why_len, "out of memory");
		goto out;
	}
	errno = 0;
	if (read_all(fd, answer, n) < 0) {
		snprintf(why, why_len, "the pjw daemon's answer was cut short");
		free(answer);
		answer = NULL;
		goto out;
	}
	answer[n] = '\0';
out:
	close(fd);
	return answer;
}

static int valid_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > PJW_MAX_NAME || (s[0] >= '0' && s[0] <= '9'))
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!(c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		      (c >= '0' && c <= '9')))
			return 0;
	}
	return 1;
}

/* Keep the [[name, value], ...] pairs of `field` of the answer; 0, or -1 if malformed. */
static int keep_vars(json_object *answer, const char *field, struct var *out, int *count)
{
	json_object *arr;
	*count = 0;
	if (!json_object_object_get_ex(answer, field, &arr))
		return 0; /* absent: none */
	if (!json_object_is_type(arr, json_type_array))
		return -1;
	size_t len = json_object_array_length(arr);
	for (size_t i = 0; i < len && *count < PJW_MAX_VARS; i++) {
		json_object *pair = json_object_array_get_idx(arr, i);
		if (!json_object_is_type(pair, json_type_array) ||
		    json_object_array_length(pair) != 2)
			return -1;
		json_object *k = json_object_array_get_idx(pair, 0);
		json_object *v = json_object_array_get_idx(pair, 1);
		if (!json_object_is_type(k, json_type_string) ||
		    !json_object_is_type(v, json_type_string))
			return -1;
		const char *name = json_object_get_string(k);
		const char *value = json_object_get_string(v);
		/* A NUL inside a value would cut it short: refuse it rather than set half. */
		if (!valid_name(name) || strlen(value) != (size_t)json_object_get_string_len(v) ||
		    strlen(value) > PJW_MAX_VALUE)
			return -1;
		out[*count].name = strdup(name);
		out[*count].value = strdup(value);
		if (!out[*count].name || !out[*count].value)
			return -1;
		(*count)++;
	}
	return 0;
}

/* Whether the space-separated NAME=VALUE list `mark` holds exactly `name`=`value`. */
static int marked(const char *mark, const char *name, const char *value)
{
	size_t nl = strlen(name), vl = strlen(value);
	const char *p = mark;
	while (*p) {
		while (*p == ' ')
			p++;
		const char *end = strchr(p, ' ');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len == nl + 1 + vl && strncmp(p, name, nl) == 0 && p[nl] == '=' &&
		    strncmp(p + nl + 1, value, vl) == 0)
			return 1;
		p += len;
	}
	return 0;
}

static int is_default(const char *name)
{
	for (int i = 0; i < n_defaults; i++)
		if (strcmp(defaults[i].name, name) == 0)
			return 1;
	return 0;
}

/* A growing text buffer; `failed` once memory ran out. */
struct buf {
	char *p;
	size_t len, cap;
	int failed;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (b->failed)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 1024;
		while (b->len + n + 1 > cap)
			cap *= 2;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->failed = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void puts_buf(struct buf *b, const char *s)
{
	put(b, s, strlen(s));
}

/* The leading decimal count of job variable NAME ("2" of "2(x3),1"): 0 and *out set, or -1
 * when the variable is absent or does not start with a count of 1 to 65535. */
static int env_count(spank_t sp, const char *name, uint32_t *out)
{
	char v[256];
	char *end = NULL;
	unsigned long n;

	if (spank_getenv(sp, name, v, sizeof(v)) != ESPANK_SUCCESS || v[0] < '0' || v[0] > '9')
		return -1;
	n = strtoul(v, &end, 10);
	if (n == 0 || n > 65535)
		return -1;
	*out = (uint32_t)n;
	return 0;
}

/* The request: the uid Slurm runs the task as, the step's CPUs per task and tasks here, and
 * the names of the variables the task's environment has — less those whose value is still
 * the one pjw set for the enclosing job script (PJW_THREAD_ENV): those are not the user's. */
static char *build_request(spank_t sp, uid_t uid)
{
	uint32_t cpt = 0, tasks = 0;
	char num[64], mark[2048] = "";
	char **env = NULL;
	struct buf b = { 0 };
	int names = 0;

	if (spank_getenv(sp, PJW_MARK, mark, sizeof(mark)) != ESPANK_SUCCESS)
		mark[0] = '\0';
	snprintf(num, sizeof(num), "{\"v\":%d,\"req\":{\"type\":\"slurm_task\",\"uid\":%u",
		 PJW_PROTO_VERSION, (unsigned)uid);
	puts_buf(&b, num);
	if (spank_get_item(sp, S_STEP_CPUS_PER_TASK, &cpt) == ESPANK_SUCCESS)
		snprintf(num, sizeof(num), ",\"cpus_per_task\":%u", cpt);
	else
		snprintf(num, sizeof(num), ",\"cpus_per_task\":null");
	puts_buf(&b, num);
	if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &tasks) == ESPANK_SUCCESS)
		snprintf(num, sizeof(num), ",\"tasks\":%u", tasks);
	else
		snprintf(num, sizeof(num), ",\"tasks\":null");
	puts_buf(&b, num);
	/* The job's own shape, for the job script's counts (the daemon uses them only for a step
	 * that is the whole allocation): its -c (SLURM_CPUS_PER_TASK, set only when given) and its
	 * tasks on the script's node (the first count of SLURM_TASKS_PER_NODE, "2(x3),1"). */
	snprintf(num, sizeof(num), ",\"job_cpus_per_task\":%s", "null");
	if (env_count(sp, "SLURM_CPUS_PER_TASK", &cpt) == 0)
		snprintf(num, sizeof(num), ",\"job_cpus_per_task\":%u", cpt);
	puts_buf(&b, num);
	snprintf(num, sizeof(num), ",\"job_tasks\":%s", "null");
	if (env_count(sp, "SLURM_TASKS_PER_NODE", &tasks) == 0)
		snprintf(num, sizeof(num), ",\"job_tasks\":%u", tasks);
	puts_buf(&b, num);
	puts_buf(&b, ",\"set\":[");
	if (spank_get_item(sp, S_JOB_ENV, &env) == ESPANK_SUCCESS && env) {
		for (char **e = env; *e && names < PJW_MAX_SET; e++) {
			const char *eq = strchr(*e, '=');
			char name[PJW_MAX_NAME + 1];
			size_t n = eq ? (size_t)(eq - *e) : 0;
			if (!eq || n == 0 || n > PJW_MAX_NAME)
				continue;
			memcpy(name, *e, n);
			name[n] = '\0';
			if (!valid_name(name) || marked(mark, name, eq + 1))
				continue;
			puts_buf(&b, names++ ? ",\"" : "\"");
			puts_buf(&b, name);
			puts_buf(&b, "\"");
		}
	}
	puts_buf(&b, "]}}");
	if (b.failed) {
		free(b.p);
		return NULL;
	}
	return b.p;
}

int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	uid_t uid;
	char why[512] = "";
	int task_id = -1;
	json_object *ans = NULL, *type, *field;
	char *req = NULL, *text = NULL;
	int rc = -1;

	if (parse_args(ac, av) < 0)
		return -1;
	spank_get_item(sp, S_TASK_ID, &task_id);
	if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS) {
		snprintf(why, sizeof(why), "cannot read the task's uid from Slurm");
		goto fail;
	}
	if (!(req = build_request(sp, uid))) {
		snprintf(why, sizeof(why), "out of memory");
		goto fail;
	}
	text = ask_daemon(req, why, sizeof(why));
	free(req);
	if (!text)
		goto fail;
	ans = json_tokener_parse(text);
	free(text);
	if (!ans || !json_object_object_get_ex(ans, "type", &type) ||
	    !json_object_is_type(type, json_type_string)) {
		snprintf(why, sizeof(why), "the pjw daemon's answer is not a pjw message");
		goto fail;
	}
	if (strcmp(json_object_get_string(type), "error") == 0) {
		const char *msg = "(no reason given)";
		if (json_object_object_get_ex(ans, "message", &field) &&
		    json_object_is_type(field, json_type_string))
			msg = json_object_get_string(field);
		snprintf(why, sizeof(why), "the pjw daemon refused: %s", msg);
		goto fail;
	}
	if (strcmp(json_object_get_string(type), "started") != 0 ||
	    !json_object_object_get_ex(ans, "job", &field) ||
	    !json_object_is_type(field, json_type_string) ||
	    keep_vars(ans, "env", over, &n_over) < 0 ||
	    keep_vars(ans, "env_defaults", defaults, &n_defaults) < 0) {
		snprintf(why, sizeof(why), "the pjw daemon's answer is malformed");
		goto fail;
	}
	snprintf(job, sizeof(job), "%s", json_object_get_string(field));
	joined = 1;
	slurm_verbose("pjw: task %d joined pjw job %s before exec", task_id, job);
	rc = 0;
	goto out;
fail:
	slurm_error("pjw: task %d not joined to its pjw job: %s", task_id, why);
out:
	if (ans)
		json_object_put(ans);
	return rc;
}

/* The thread variables the daemon gave this task: it already left out those the user set (the
 * request named them), so each is set, replacing pjw's value for the enclosing job script
 * where one was inherited. pjw's values of the enclosing level that this task gets none for
 * (OMP_PLACES of a script, in a step of several tasks) are removed if still unchanged.
 * PJW_THREAD_ENV then lists what pjw set here. */
static void set_thread_vars(spank_t sp)
{
	char mark[2048] = "", cur[PJW_MAX_VALUE + 1];
	char now[2048] = "";
	size_t used = 0;

	if (spank_getenv(sp, PJW_MARK, mark, sizeof(mark)) != ESPANK_SUCCESS)
		mark[0] = '\0';
	for (int i = 0; i < n_defaults; i++) {
		struct var *v = &defaults[i];
		if (spank_setenv(sp, v->name, v->value, 1) != ESPANK_SUCCESS) {
			slurm_error("pjw: cannot set %s in the task's environment", v->name);
			continue;
		}
		if (!strchr(v->value, ' ')) {
			int n = snprintf(now + used, sizeof(now) - used, "%s%s=%s", used ? " " : "",
					 v->name, v->value);
			if (n > 0 && (size_t)n < sizeof(now) - used)
				used += (size_t)n;
			else
				now[used] = '\0';
		}
	}
	for (char *p = mark; *p;) {
		while (*p == ' ')
			p++;
		char *end = strchr(p, ' ');
		if (end)
			*end = '\0';
		char *eq = strchr(p, '=');
		if (eq) {
			*eq = '\0';
			if (valid_name(p) && !is_default(p) &&
			    spank_getenv(sp, p, cur, sizeof(cur)) == ESPANK_SUCCESS &&
			    strcmp(cur, eq + 1) == 0)
				spank_unsetenv(sp, p);
		}
		if (!end)
			break;
		p = end + 1;
	}
	if (used)
		spank_setenv(sp, PJW_MARK, now, 1);
	else
		spank_unsetenv(sp, PJW_MARK);
}

/* The task's own process again, as the job's user, after Slurm set its GPU variables and
 * before the task prologs and exec. */
int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!spank_remote(sp) || !joined)
		return 0;
	for (int i = 0; i < n_over; i++)
		if (spank_setenv(sp, over[i].name, over[i].value, 1) != ESPANK_SUCCESS)
			slurm_error("pjw: cannot set %s in the task's environment", over[i].name);
	set_thread_vars(sp);
	return 0;
}
