/*
 * ffleet_spawn: start a process the way posix_spawn(3) does instead of Node's fork(2) + exec, tied to
 * the agent's life, and report its exit through a pidfd watched on Node's event loop.
 *
 * Why: libuv 1.46 (Node 20) forks the whole agent to start each process. The kernel copies the page
 * tables of ~60 MB of Node, the child and the parent then take copy-on-write faults until the exec, and
 * the exec tears the copy down again. Measured on a 2-vCPU VM: 4.1 ms of the agent's CPU and 5.4 ms of
 * the child's per start, against 0.5 ms and 2.4 ms with glibc's posix_spawn, which runs the child on
 * the parent's memory (clone with CLONE_VM | CLONE_VFORK) until it execs.
 *
 * The child gets what Node's `spawn(file, args, { detached: true, stdio: ['ignore', out, err] })`
 * gives it: a session and process group of its own, every signal at its default disposition and none
 * blocked, stdin from /dev/null, stdout and stderr on the given descriptors, the given working
 * directory and exactly the given environment. Every other descriptor of the agent is close-on-exec
 * (Node opens all of its own that way). And one thing Node's spawn cannot give: PR_SET_PDEATHSIG, so
 * the process is SIGKILLed when the agent dies (see child_main). posix_spawn has no attribute for it,
 * so start() does what glibc's posix_spawn does (the same clone, the same cost: 0.05–0.07 ms of the
 * agent's CPU per start either way, 2,000 starts of /bin/true from a 110 MB Node process) and sets it
 * up in the child.
 *
 * The exit is seen without threads and without touching libuv's own SIGCHLD handling: libuv reaps
 * only the pids it started (waitpid per pid), so a pidfd (Linux 5.3) polled on the loop becomes
 * readable when the process ends and waitpid reaps it here. The poll handle keeps the loop alive while
 * the process runs, as a ChildProcess does.
 *
 * Built at `npm install` by build.mjs when a C compiler and Node's headers are there; without it the
 * agent uses Node's spawn (run-process.ts), which does the same more slowly and leaves a process of an
 * agent killed outright running (the orphan killer, agent/src/orphans.ts, ends it when the agent next
 * starts on that box).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <node_api.h>
#include <uv.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

/* One running process: its pidfd's poll handle and the JS callback for its exit. */
typedef struct watch {
  uv_poll_t poll;
  int pidfd;
  pid_t pid;
  napi_env env;
  napi_ref callback;
  napi_async_context context;
  struct watch *prev, *next;
  struct instance *owner;
} watch_t;

/* Per Node environment (main thread or worker): the processes being watched, for the cleanup hook. */
typedef struct instance {
  watch_t *head;
} instance_t;

static void unlink_watch(watch_t *w) {
  if (w->prev) w->prev->next = w->next;
  else if (w->owner) w->owner->head = w->next;
  if (w->next) w->next->prev = w->prev;
  w->prev = w->next = NULL;
  w->owner = NULL;
}

static void free_on_close(uv_handle_t *handle) { free(handle->data); }

static void release(watch_t *w) {
  uv_poll_stop(&w->poll);
  close(w->pidfd);
  unlink_watch(w);
  uv_close((uv_handle_t *)&w->poll, free_on_close);
}

static void on_pidfd_readable(uv_poll_t *handle, int status, int events) {
  (void)events;
  watch_t *w = handle->data;
  int wstatus = 0;
  pid_t reaped;
  do reaped = waitpid(w->pid, &wstatus, WNOHANG);
  while (reaped < 0 && errno == EINTR);
  if (reaped == 0 && status == 0) return; /* spurious: still running */

  napi_env env = w->env;
  napi_handle_scope scope;
  napi_open_handle_scope(env, &scope);
  napi_value callback, receiver, argv[2], ignored;
  napi_get_reference_value(env, w->callback, &callback);
  napi_get_global(env, &receiver);
  if (reaped == w->pid && WIFEXITED(wstatus)) {
    napi_create_int32(env, WEXITSTATUS(wstatus), &argv[0]);
    napi_get_null(env, &argv[1]);
  } else if (reaped == w->pid && WIFSIGNALED(wstatus)) {
    napi_get_null(env, &argv[0]);
    napi_create_int32(env, WTERMSIG(wstatus), &argv[1]);
  } else {
    /* Reaped by someone else or the poll failed: the status is lost; say so as (null, null). */
    napi_get_null(env, &argv[0]);
    napi_get_null(env, &argv[1]);
  }
  napi_async_context context = w->context;
  napi_ref ref = w->callback;
  release(w);
  /* An exception thrown by the callback surfaces as Node's uncaught exception. */
  napi_make_callback(env, context, receiver, callback, 2, argv, &ignored);
  napi_async_destroy(env, context);
  napi_delete_reference(env, ref);
  napi_close_handle_scope(env, scope);
}

/* The environment is going away (process exit, worker end): stop watching, keep nothing open. */
static void cleanup_instance(void *data) {
  instance_t *inst = data;
  while (inst->head) {
    watch_t *w = inst->head;
    napi_async_destroy(w->env, w->context);
    napi_delete_reference(w->env, w->callback);
    release(w);
  }
  free(inst);
}

static napi_value throw_error(napi_env env, const char *message) {
  napi_throw_type_error(env, NULL, message);
  return NULL;
}

/* A JS string as a new C string; NULL (with a JS exception pending) if it is not a string. */
static char *get_string(napi_env env, napi_value value) {
  size_t length;
  if (napi_get_value_string_utf8(env, value, NULL, 0, &length) != napi_ok) return NULL;
  char *s = malloc(length + 1);
  if (s == NULL) return NULL;
  napi_get_value_string_utf8(env, value, s, length + 1, &length);
  return s;
}

static void free_strings(char **list) {
  if (list == NULL) return;
  for (char **p = list; *p; p++) free(*p);
  free(list);
}

/* A JS array of strings as a NULL-terminated C array. */
static char **get_strings(napi_env env, napi_value array) {
  uint32_t n;
  if (napi_get_array_length(env, array, &n) != napi_ok) return NULL;
  char **list = calloc((size_t)n + 1, sizeof(char *));
  if (list == NULL) return NULL;
  for (uint32_t i = 0; i < n; i++) {
    napi_value element;
    napi_get_element(env, array, i, &element);
    list[i] = get_string(env, element);
    if (list[i] == NULL) {
      free_strings(list);
      return NULL;
    }
  }
  return list;
}

/* What the child of start() needs, on the parent's memory (CLONE_VM); `error` is its answer. */
typedef struct child_args {
  const char *file;
  char **argv, **envp;
  const char *cwd;
  int out, err;
  pid_t parent;
  int die_with_parent;
  volatile int error;
} child_args_t;

/* In the child before exec: any failure is stored for the parent, which is waiting (CLONE_VFORK). */
static int child_fail(child_args_t *a, int error) {
  a->error = error ? error : EINVAL;
  _exit(127);
}

/* Put `fd` on `target` (dup2), or clear its close-on-exec flag when it already is `target`. */
static int place(int fd, int target) {
  if (fd != target) return dup2(fd, target) < 0 ? -1 : 0;
  int flags = fcntl(fd, F_GETFD);
  return flags < 0 || fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) < 0 ? -1 : 0;
}

/*
 * The child, on a stack of its own, sharing the agent's memory until it execs (the agent's thread is
 * suspended meanwhile): only system calls here, no allocation, no locks.
 */
static int child_main(void *p) {
  child_args_t *a = p;
  /* Every signal at its default disposition: exec keeps ignored ones (Node ignores SIGPIPE), and a
   * handler of the agent's must never run here, on the agent's memory. Signals are blocked since
   * before the clone; glibc's own two (32, 33) cannot be touched through sigaction and are only ever
   * sent to the agent's threads. */
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; sig++) {
    if (sig == SIGKILL || sig == SIGSTOP || sig == 32 || sig == 33) continue;
    sigaction(sig, &dfl, NULL);
  }
  if (setsid() < 0) child_fail(a, errno);
  /* Killed with the agent: an agent that dies (SIGKILL, OOM, a crash) takes its transcoder or script
   * with it instead of leaving it writing an output that another attempt now owns. The signal comes
   * when the thread that started the child ends, so only a start from the main thread (whose end is the
   * process's) asks for it; a Worker's children would otherwise die with the Worker. */
  if (a->die_with_parent && prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) child_fail(a, errno);
  /* The agent died between the clone and the prctl: nobody would send it. */
  if (getppid() != a->parent) child_fail(a, ESRCH);
  int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null < 0 || place(null, 0) < 0) child_fail(a, errno);
  if (null != 0) close(null);
  if (place(a->out, 1) < 0 || place(a->err, 2) < 0) child_fail(a, errno);
  if (a->cwd && chdir(a->cwd) < 0) child_fail(a, errno);
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, NULL);
  execve(a->file, a->argv, a->envp);
  return child_fail(a, errno);
}

#define CHILD_STACK_BYTES (256 * 1024)

/*
 * Start the process: clone(CLONE_VM | CLONE_VFORK) as glibc's posix_spawn does (no copy of the agent's
 * page tables), with the child's set-up done here because posix_spawn has no attribute for
 * PR_SET_PDEATHSIG. Returns 0 with *pid set, or the errno of what failed (nothing runs then).
 */
static int start(pid_t *pid, const char *file, char **argv, char **envp, const char *cwd, int out, int err) {
  void *stack = mmap(NULL, CHILD_STACK_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return errno;
  child_args_t a = {file, argv, envp, cwd, out, err, getpid(), (pid_t)syscall(SYS_gettid) == getpid(), 0};
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  pid_t child = clone(child_main, (char *)stack + CHILD_STACK_BYTES, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
  int clone_error = errno;
  pthread_sigmask(SIG_SETMASK, &saved, NULL);
  munmap(stack, CHILD_STACK_BYTES);
  if (child < 0) return clone_error;
  if (a.error) {
    /* It never ran the program: reap it here (libuv does not know this pid). */
    while (waitpid(child, NULL, 0) < 0 && errno == EINTR) {
    }
    return a.error;
  }
  *pid = child;
  return 0;
}

/*
 * spawn(file, argv, envp, cwd | null, stdoutFd, stderrFd, onExit(code, signal)) → pid, or -errno when
 * the process could not be started (nothing runs then and onExit is never called). `file` is a path,
 * not looked up on PATH; argv[0] is given by the caller.
 */
static napi_value Spawn(napi_env env, napi_callback_info info) {
  size_t argc = 7;
  napi_value args[7];
  instance_t *inst = NULL;
  napi_get_cb_info(env, info, &argc, args, NULL, (void **)&inst);
  if (argc < 7) return throw_error(env, "spawn: 7 arguments expected");
  napi_valuetype type;
  napi_typeof(env, args[6], &type);
  if (type != napi_function) return throw_error(env, "spawn: onExit must be a function");
  int32_t out, err;
  if (napi_get_value_int32(env, args[4], &out) != napi_ok || napi_get_value_int32(env, args[5], &err) != napi_ok)
    return throw_error(env, "spawn: descriptors must be numbers");
  napi_typeof(env, args[3], &type);
  char *file = get_string(env, args[0]);
  char **argv = get_strings(env, args[1]);
  char **envp = get_strings(env, args[2]);
  char *cwd = type == napi_string ? get_string(env, args[3]) : NULL;
  napi_value result;
  if (file == NULL || argv == NULL || envp == NULL || (type == napi_string && cwd == NULL)) {
    free(file);
    free_strings(argv);
    free_strings(envp);
    free(cwd);
    return throw_error(env, "spawn: file, argv, envp and cwd must be strings");
  }

  pid_t pid = 0;
  int rc = start(&pid, file, argv, envp, cwd, out, err);
  free(file);
  free_strings(argv);
  free_strings(envp);
  free(cwd);
  if (rc) {
    napi_create_int32(env, -rc, &result);
    return result;
  }

  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
  watch_t *w = pidfd >= 0 ? calloc(1, sizeof *w) : NULL;
  uv_loop_t *loop = NULL;
  napi_get_uv_event_loop(env, &loop);
  if (w == NULL || loop == NULL || inst == NULL || uv_poll_init(loop, &w->poll, pidfd) != 0) {
    /* Started but cannot be watched (out of descriptors or memory): stop it and report the failure. */
    int saved = pidfd < 0 ? errno : ENOMEM;
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    if (pidfd >= 0) close(pidfd);
    free(w);
    napi_create_int32(env, -saved, &result);
    return result;
  }
  w->pidfd = pidfd;
  w->pid = pid;
  w->env = env;
  w->poll.data = w;
  napi_create_reference(env, args[6], 1, &w->callback);
  napi_value resource, name;
  napi_create_object(env, &resource);
  napi_create_string_utf8(env, "ffleet.spawn", NAPI_AUTO_LENGTH, &name);
  napi_async_init(env, resource, name, &w->context);
  w->owner = inst;
  w->next = inst->head;
  if (inst->head) inst->head->prev = w;
  inst->head = w;
  uv_poll_start(&w->poll, UV_READABLE, on_pidfd_readable);
  napi_create_int32(env, pid, &result);
  return result;
}

/*
 * punchHole(fd, offset, length) → 0 or -errno: frees the file's blocks in that range, keeping its size
 * and every offset after it (fallocate(2) FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE). A capture file
 * whose output has been read is emptied this way while the process goes on appending to it: unlike a
 * truncation, nothing it writes meanwhile is lost. tmpfs, ext4, xfs and btrfs support it.
 */
static napi_value PunchHole(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3], result;
  int64_t fd = -1, offset = 0, length = 0;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 3 || napi_get_value_int64(env, argv[0], &fd) != napi_ok ||
      napi_get_value_int64(env, argv[1], &offset) != napi_ok ||
      napi_get_value_int64(env, argv[2], &length) != napi_ok || fd < 0 || offset < 0 || length < 0)
    return throw_error(env, "punchHole(fd, offset, length): three non-negative integers");
  int rc = length == 0 ? 0
                       : fallocate((int)fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)offset,
                                   (off_t)length);
  napi_create_int32(env, rc == 0 ? 0 : -errno, &result);
  return result;
}

/*
 * hideMemory() → 0, or -errno: prctl(PR_SET_DUMPABLE, 0) for the whole agent process. Its environment
 * holds its token (and, in the all-in-one, the API tokens and the database URL), which it passes to no
 * child; but a non-root process of the same user may read any dumpable process's /proc/<pid>/environ
 * and memory, and the agent's children are that: a task's ffmpeg command (`-i /proc/<ppid>/environ`)
 * or script. Not dumpable, the agent's /proc entries belong to root and ptrace-type access by its own
 * user is refused; what it starts is dumpable again from its exec on. No core dumps either (they would
 * hold the same secrets).
 */
static napi_value HideMemory(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
  napi_create_int32(env, prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 ? 0 : -errno, &result);
  return result;
}

NAPI_MODULE_INIT() {
  /* pidfd_open must work here (Linux 5.3, not filtered by a seccomp profile), or the module is of no use. */
  int probe = (int)syscall(SYS_pidfd_open, getpid(), 0);
  if (probe >= 0) close(probe);
  /* Without its per-environment list (out of memory) it cannot be used either: `available` says so. */
  instance_t *inst = probe >= 0 ? calloc(1, sizeof *inst) : NULL;
  napi_value available, fn;
  napi_get_boolean(env, inst != NULL, &available);
  napi_set_named_property(env, exports, "available", available);
  if (inst == NULL) return exports;
  napi_add_env_cleanup_hook(env, cleanup_instance, inst);
  napi_create_function(env, "spawn", NAPI_AUTO_LENGTH, Spawn, inst, &fn);
  napi_set_named_property(env, exports, "spawn", fn);
  napi_create_function(env, "punchHole", NAPI_AUTO_LENGTH, PunchHole, NULL, &fn);
  napi_set_named_property(env, exports, "punchHole", fn);
  napi_create_function(env, "hideMemory", NAPI_AUTO_LENGTH, HideMemory, NULL, &fn);
  napi_set_named_property(env, exports, "hideMemory", fn);
  return exports;
}
