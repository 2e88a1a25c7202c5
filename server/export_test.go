package server

// GateHeld is the connect gate's slots held and sockets holding one.
func (s *Server) GateHeld() (slots, holders int) {
	s.gate.mu.Lock()
	defer s.gate.mu.Unlock()
	return len(s.gate.slots), len(s.gate.holders)
}

// SplitPayload is splitPayload.
var SplitPayload = splitPayload
