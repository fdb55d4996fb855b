package testkit

// EscapeEnv, in a child's environment, makes the test binary an escapee
// (EscapeRole): "a" its first stage, started from an agent's script;
// "b" its second, which the first starts. Linux only.
const EscapeEnv = "RESIDENTD_TEST_ESCAPE"

// EscapeRole is the test binary as a descendant of an agent that sheds
// every sign of its agent it can, for the tests of the fence across
// restarts. Its first stage, started by an agent, moves itself to another
// cgroup (ESCAPE_CGROUP: "sibling", a cgroup it makes beside its agent's,
// in the agents' subtree; "out", the cgroup above the subtree, the
// daemon's own; "" stays), lowers its hard RLIMIT_RTTIME out of the
// rlimit mark's range when ESCAPE_SHED_LIMIT is 1, calls setsid, starts
// the second stage with an environment of nothing but its role, its
// directory and the first stage's pid, and exits: a double fork. The
// second stage, once the first has exited, writes "pid N" to the fifo
// ESCAPE_DIR/ready (the first writes "error …" there when a step fails),
// then answers each socket path written to ESCAPE_DIR/cmd with the status
// and error code of its GET /v1/runs there, on ESCAPE_DIR/out, until it
// is killed. See Escape for the test's side.
var EscapeRole = Role{Env: EscapeEnv, Main: escapeMain}
