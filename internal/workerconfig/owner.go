// This file holds cache owner ids: their shape, their derivation, and the ones an operator sets.

package workerconfig

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

var ownerIDPattern = regexp.MustCompile(`^[0-9a-f]{32}:[0-9a-f]{32}/[0-9a-f]{16}/[0-9a-f]{32}$`)

// ValidOwnerID reports whether s is a canonical cache owner id (docs/wire.md §5.7).
func ValidOwnerID(s string) bool { return ownerIDPattern.MatchString(s) }

// OwnerDomain is an owner's indexer domain: the text before the first "/".
func OwnerDomain(id string) string {
	domain, _, _ := strings.Cut(id, "/")
	return domain
}

// DeriveOwnerID computes the owner id of a runner that names none itself.
// It depends only on what survives an engine restart, so a restarted worker
// keeps its owner and its runner's blocks stay addressable:
//   - semantics: engine, model and KV block size (what a block's bytes mean);
//   - scope: the model (every runner of a model shares one indexer domain,
//     semantics:scope, which is what lets the router compare them);
//   - dc: the advertised host (runners of one machine group together);
//   - slot: model, advertised control endpoint and DP rank (this runner).
func DeriveOwnerID(engine Engine, model string, kvBlockSize int, endpoint string, dpRank int) string {
	host := endpoint
	if e, err := parseZMQ(endpoint, ""); err == nil && e.scheme == schemeTCP {
		host = e.host
	}
	bs := strconv.Itoa(kvBlockSize)
	return digestHex("kvrouter/owner/semantics/v1", 16, string(engine), model, bs) + ":" +
		digestHex("kvrouter/owner/scope/v1", 16, model) + "/" +
		digestHex("kvrouter/owner/dc/v1", 8, host) + "/" +
		digestHex("kvrouter/owner/slot/v1", 16, model, endpoint, strconv.Itoa(dpRank))
}

// digestHex hashes length-prefixed fields so that no two field lists collide.
func digestHex(tag string, n int, fields ...string) string {
	h := sha256.New()
	var lenBuf [binary.MaxVarintLen64]byte
	for _, f := range append([]string{tag}, fields...) {
		h.Write(lenBuf[:binary.PutUvarint(lenBuf[:], uint64(len(f)))])
		h.Write([]byte(f))
	}
	return hex.EncodeToString(h.Sum(nil)[:n])
}

// givenOwners reads owner ids an operator set in the runner options:
// owner_id (one DP rank), or owner_ids as a list in local DP rank order or
// an object keyed by global DP rank. ok is false when neither is set.
func givenOwners(o object, ranks []int) (owners map[int]string, ok bool, err error) {
	one, many := o.present(KVCROwnerID), o.present(KVCROwnerIDs)
	switch {
	case one && many:
		return nil, false, configErr(ErrInvalidOwnerID, o.name(KVCROwnerIDs), "set either %s or %s, not both", KVCROwnerID, KVCROwnerIDs)
	case !one && !many:
		return nil, false, nil
	}
	owners = make(map[int]string, len(ranks))
	if one {
		name := o.name(KVCROwnerID)
		if len(ranks) != 1 {
			return nil, false, configErr(ErrInvalidOwnerID, name,
				"names one owner but this worker runs %d DP ranks; set %s with one id per DP rank", len(ranks), KVCROwnerIDs)
		}
		id, isStr := o.m[KVCROwnerID].(string)
		if !isStr {
			return nil, false, configErr(ErrInvalidOwnerID, name, "must be a string, got %s", kindOf(o.m[KVCROwnerID]))
		}
		owners[ranks[0]] = id
		return owners, true, checkOwners(owners, ranks, name)
	}
	name := o.name(KVCROwnerIDs)
	switch v := o.m[KVCROwnerIDs].(type) {
	case []any:
		if len(v) != len(ranks) {
			return nil, false, configErr(ErrInvalidOwnerID, name, "has %d ids for %d DP ranks; give one per DP rank, in rank order", len(v), len(ranks))
		}
		for i, item := range v {
			s, isStr := item.(string)
			if !isStr {
				return nil, false, configErr(ErrInvalidOwnerID, name+"["+strconv.Itoa(i)+"]", "must be a string, got %s", kindOf(item))
			}
			owners[ranks[i]] = s
		}
	case map[string]any:
		want := make(map[string]int, len(ranks))
		for _, r := range ranks {
			want[strconv.Itoa(r)] = r
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			r, inRange := want[k]
			if !inRange {
				return nil, false, configErr(ErrInvalidOwnerID, name, "key %q is not one of this worker's DP ranks %v", k, ranks)
			}
			s, isStr := v[k].(string)
			if !isStr {
				return nil, false, configErr(ErrInvalidOwnerID, name+"."+k, "must be a string, got %s", kindOf(v[k]))
			}
			owners[r] = s
		}
		if len(owners) != len(ranks) {
			return nil, false, configErr(ErrInvalidOwnerID, name, "names %d of this worker's %d DP ranks %v; name every rank", len(owners), len(ranks), ranks)
		}
	default:
		return nil, false, configErr(ErrInvalidOwnerID, name, "must be a list or an object of owner ids, got %s", kindOf(v))
	}
	return owners, true, checkOwners(owners, ranks, name)
}

func checkOwners(owners map[int]string, ranks []int, name string) error {
	seen := make(map[string]int, len(owners))
	for _, r := range ranks {
		id := owners[r]
		if !ValidOwnerID(id) {
			return configErr(ErrInvalidOwnerID, name,
				"DP rank %d: %q is not semantics:scope/dc/slot in lowercase hex (32:32/16/32 hex digits)", r, id)
		}
		if other, dup := seen[id]; dup {
			return configErr(ErrInvalidOwnerID, name, "DP ranks %d and %d share owner %s; each rank's runner needs its own owner", other, r, id)
		}
		seen[id] = r
	}
	return nil
}
