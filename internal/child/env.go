package child

import "strings"

// envDrop names the variables addressed to the daemon alone: a service
// manager's (an agent inheriting them could ping the watchdog or claim the
// daemon's sockets) and the daemon's own socket.
var envDrop = map[string]bool{
	"NOTIFY_SOCKET":  true,
	"LISTEN_PID":     true,
	"LISTEN_FDS":     true,
	"LISTEN_FDNAMES": true,
	"WATCHDOG_USEC":  true,
	"WATCHDOG_PID":   true,
	MarkEnv:          true, // each agent gets a mark of its own
	// The socket path goes only to the tool bridge (`residentd mcp`), in
	// the MCP server's own environment.
	"RESIDENTD_SOCKET": true,
}

// CleanEnv returns env without the service-manager variables meant for the
// daemon alone. The input is not modified.
func CleanEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if envDrop[k] {
			continue
		}
		out = append(out, kv)
	}
	return out
}
