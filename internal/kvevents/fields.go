// This file holds the event fields: names, array positions, and the fields each kind accepts.

package kvevents

// field identifies an event field independently of its encoding.
type field uint8

const (
	fUnknown field = iota
	fType
	fBlockHashes
	fParent
	fTokenIDs
	fBlockSize
	fLoRAID
	fMedium
	fLoRAName
	fExtraKeys
	fGroupIdx
	fSpecKind
	fSlidingWindow
	fLocality
	fOwnership
	fSessionID
	fCacheSalt
	// fSGLangExtra is array position 7 of a BlockStored when it holds a
	// map: SGLang's older array form puts {"cache_salt": ...} there where
	// vLLM has lora_name.
	fSGLangExtra
)

var fieldNames = [...]string{
	fUnknown:       "",
	fType:          KeyType,
	fBlockHashes:   KeyBlockHashes,
	fParent:        KeyParent,
	fTokenIDs:      KeyTokenIDs,
	fBlockSize:     KeyBlockSize,
	fLoRAID:        KeyLoRAID,
	fMedium:        KeyMedium,
	fLoRAName:      KeyLoRAName,
	fExtraKeys:     KeyExtraKeys,
	fGroupIdx:      KeyGroupIdx,
	fSpecKind:      KeySpecKind,
	fSlidingWindow: KeySlidingWindow,
	fLocality:      KeyLocality,
	fOwnership:     KeyOwnership,
	fSessionID:     KeySessionID,
	fCacheSalt:     KeyCacheSalt,
	fSGLangExtra:   "[7]",
}

// fieldOf maps a map key to its field; the switch on string(key) does not
// allocate.
func fieldOf(key []byte) field {
	switch string(key) {
	case KeyType:
		return fType
	case KeyBlockHashes:
		return fBlockHashes
	case KeyParent:
		return fParent
	case KeyTokenIDs:
		return fTokenIDs
	case KeyBlockSize:
		return fBlockSize
	case KeyLoRAID:
		return fLoRAID
	case KeyMedium:
		return fMedium
	case KeyLoRAName:
		return fLoRAName
	case KeyExtraKeys:
		return fExtraKeys
	case KeyGroupIdx:
		return fGroupIdx
	case KeySpecKind:
		return fSpecKind
	case KeySlidingWindow:
		return fSlidingWindow
	case KeyLocality:
		return fLocality
	case KeyOwnership:
		return fOwnership
	case KeySessionID:
		return fSessionID
	case KeyCacheSalt:
		return fCacheSalt
	}
	return fUnknown
}

// fieldSet is a bitmask of fields.
type fieldSet uint32

func setOf(fs ...field) fieldSet {
	var s fieldSet
	for _, f := range fs {
		s |= 1 << f
	}
	return s
}

func (s fieldSet) has(f field) bool { return s&(1<<f) != 0 }

// Positional fields of the array forms, after the tag, in vLLM declaration
// order; map-only fields (locality, ownership, session_id) have no position.
var (
	storedPositions = []field{fBlockHashes, fParent, fTokenIDs, fBlockSize, fLoRAID,
		fMedium, fLoRAName, fExtraKeys, fGroupIdx, fSpecKind, fSlidingWindow}
	removedPositions = []field{fBlockHashes, fMedium, fGroupIdx}
)

// Fields each kind accepts by name; other keys are skipped and counted.
var (
	storedFields = setOf(storedPositions...) |
		setOf(fLocality, fOwnership, fSessionID, fCacheSalt)
	removedFields  = setOf(removedPositions...) | setOf(fLocality, fOwnership)
	clearedFields  = setOf(fOwnership)
	sglangExtra    = setOf(fCacheSalt, fSessionID, fLoRAName)
	storedRequired = setOf(fBlockHashes, fTokenIDs, fBlockSize)
)

func kindOf(tag []byte) Kind {
	switch string(tag) {
	case TagStored:
		return KindStored
	case TagRemoved:
		return KindRemoved
	case TagCleared:
		return KindCleared
	}
	return 0
}
