package proc

import "testing"

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		line string
		want Stat
		ok   bool
	}{
		{"command with blanks and parentheses", "4242 (evil) (name) S 1 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615\n",
			Stat{Pid: 4242, State: 'S', Ppid: 1, Pgrp: 4240, Start: 987654}, true},
		{"zombie", "7 (sh) Z 6 7 7 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 55 0 0 0\n",
			Stat{Pid: 7, State: 'Z', Ppid: 6, Pgrp: 7, Start: 55}, true},
		{"truncated", "1 (x) S 0", Stat{}, false},
		{"no command field", "1 x S 0 1 1 0 -1 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0 0 0", Stat{}, false},
		{"bad pgrp", "1 (x) S 0 one 1 0 -1 0 0 0 0 0 0 0 0 0 0 0 0 0 1 0 0 0", Stat{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid := tt.want.Pid
			if !tt.ok {
				pid = 1
			}
			got, err := Parse(pid, []byte(tt.line))
			if (err == nil) != tt.ok || got != tt.want {
				t.Errorf("Parse = %+v, %v; want %+v (ok %v)", got, err, tt.want, tt.ok)
			}
		})
	}
}
