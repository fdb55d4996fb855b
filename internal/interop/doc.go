// Package interop tests residentd against real ACP agents nobody here wrote
// (claude-agent-acp and the acp-go-sdk example agent), driven through the daemon.
package interop
