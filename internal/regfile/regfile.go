// Package regfile opens the files the daemon reads on someone else's word
// (an attachment path in a push, the config file, a binding's system_file,
// an agent's fs/read_text_file) and refuses anything but a regular file
// before reading it. A FIFO would block open(2) until a writer came, holding
// an OS thread per request; a device may never end; a socket or a directory
// is no file to read. Nothing here blocks on what a path names.
package regfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular classifies a path that names something other than a
// regular file; the error is a *NotRegularError saying what.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge classifies a file over the bound its reader allows.
var ErrTooLarge = errors.New("file too large")

// NotRegularError is a path that names a FIFO, a socket, a device, a
// directory or (opened without following links) a symbolic link.
type NotRegularError struct {
	Path string
	What string // with its article: "a FIFO (named pipe)", "a directory", …
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is %s, not a regular file", e.Path, e.What)
}

func (e *NotRegularError) Is(target error) bool { return target == ErrNotRegular }

// What names the kind of file mode m is, with its article.
func What(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO (named pipe)"
	case m&fs.ModeSocket != 0:
		return "a Unix socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "an irregular file"
}

// Open opens the regular file at path for reading, following symbolic
// links, and returns it with its FileInfo.
func Open(path string) (*os.File, fs.FileInfo, error) { return open(path, false) }

// OpenNoFollow is Open for a path whose symbolic links the caller has
// resolved already: a final component that is a link now (swapped in since)
// is refused.
func OpenNoFollow(path string) (*os.File, fs.FileInfo, error) { return open(path, true) }

// open refuses what path names unless it is a regular file, before opening
// it (so a device is never opened), then opens it with O_NONBLOCK (so a
// FIFO swapped in meanwhile does not block the open) and checks again what
// it opened.
func open(path string, nofollow bool) (*os.File, fs.FileInfo, error) {
	stat, flags := os.Stat, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC
	if nofollow {
		stat, flags = os.Lstat, flags|syscall.O_NOFOLLOW
	}
	fi, err := stat(path)
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, &NotRegularError{Path: path, What: What(fi.Mode())}
	}
	var fd int
	for {
		fd, err = syscall.Open(path, flags, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err == syscall.ELOOP && nofollow {
		return nil, nil, &NotRegularError{Path: path, What: What(fs.ModeSymlink)}
	}
	if err != nil {
		return nil, nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(fd)
		return nil, nil, &NotRegularError{Path: path, What: whatStat(uint32(st.Mode))}
	}
	// Reads of a regular file ignore O_NONBLOCK on Linux and macOS; the file
	// is handed over blocking all the same, so os keeps it out of the poller.
	if err := syscall.SetNonblock(fd, false); err != nil {
		syscall.Close(fd)
		return nil, nil, &fs.PathError{Op: "fcntl", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	if fi, err = f.Stat(); err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// whatStat names the kind of a stat(2) mode.
func whatStat(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFIFO:
		return What(fs.ModeNamedPipe)
	case syscall.S_IFSOCK:
		return What(fs.ModeSocket)
	case syscall.S_IFCHR:
		return What(fs.ModeDevice | fs.ModeCharDevice)
	case syscall.S_IFBLK:
		return What(fs.ModeDevice)
	case syscall.S_IFDIR:
		return What(fs.ModeDir)
	case syscall.S_IFLNK:
		return What(fs.ModeSymlink)
	}
	return What(fs.ModeIrregular)
}

// Read returns the content of the regular file at path (links followed),
// refusing one of more than max bytes with an error wrapping ErrTooLarge.
func Read(path string, max int64) ([]byte, error) {
	f, fi, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi.Size() > max {
		return nil, fmt.Errorf("%s holds %d bytes, more than the %d allowed: %w", path, fi.Size(), max, ErrTooLarge)
	}
	// The file may grow between the stat and the read: read one byte over.
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s holds more than the %d bytes allowed: %w", path, max, ErrTooLarge)
	}
	return data, nil
}
