package lastseen

// PresenceListJSONLen is l.jsonLen, for the fuzz test.
func PresenceListJSONLen(l PresenceList) int { return l.jsonLen() }
