package service

// The repository's systemd/ and deploy/launchd/ files are rendered from
// templates/; this rewrites them after a template changes.
//go:generate go test -run ^TestRepoFilesAreRendered$ -update .
