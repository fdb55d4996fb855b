package delivery

import (
	"errors"
	"fmt"
)

// Placement says where a binding's brief goes.
type Placement string

// Brief placements.
const (
	// InTurn puts the brief in every user turn (the source's behaviour).
	InTurn Placement = "turn"
	// InFraming puts the brief after the system framing on cold and restored
	// turns; warm turns carry BriefPointer, and the full brief again every
	// brief_every warm turns.
	InFraming Placement = "framing"
)

// Placements lists every placement.
var Placements = []Placement{InTurn, InFraming}

// ErrBadPlacement classifies a placement name that is not one of Placements.
var ErrBadPlacement = errors.New("unknown brief placement")

// Check reports a placement that is not one of Placements.
func (p Placement) Check() error {
	for _, q := range Placements {
		if p == q {
			return nil
		}
	}
	return fmt.Errorf("%w %q: use turn or framing", ErrBadPlacement, string(p))
}
