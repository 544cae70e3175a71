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
	fType:          keyType,
	fBlockHashes:   keyBlockHashes,
	fParent:        keyParent,
	fTokenIDs:      keyTokenIDs,
	fBlockSize:     keyBlockSize,
	fLoRAID:        keyLoRAID,
	fMedium:        keyMedium,
	fLoRAName:      keyLoRAName,
	fExtraKeys:     keyExtraKeys,
	fGroupIdx:      keyGroupIdx,
	fSpecKind:      keySpecKind,
	fSlidingWindow: keySlidingWindow,
	fLocality:      keyLocality,
	fOwnership:     keyOwnership,
	fSessionID:     keySessionID,
	fCacheSalt:     keyCacheSalt,
	fSGLangExtra:   "[7]",
}

// fieldOf maps a map key to its field; the switch on string(key) does not
// allocate.
func fieldOf(key []byte) field {
	switch string(key) {
	case keyType:
		return fType
	case keyBlockHashes:
		return fBlockHashes
	case keyParent:
		return fParent
	case keyTokenIDs:
		return fTokenIDs
	case keyBlockSize:
		return fBlockSize
	case keyLoRAID:
		return fLoRAID
	case keyMedium:
		return fMedium
	case keyLoRAName:
		return fLoRAName
	case keyExtraKeys:
		return fExtraKeys
	case keyGroupIdx:
		return fGroupIdx
	case keySpecKind:
		return fSpecKind
	case keySlidingWindow:
		return fSlidingWindow
	case keyLocality:
		return fLocality
	case keyOwnership:
		return fOwnership
	case keySessionID:
		return fSessionID
	case keyCacheSalt:
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
	case tagStored:
		return KindStored
	case tagRemoved:
		return KindRemoved
	case tagCleared:
		return KindCleared
	}
	return 0
}
