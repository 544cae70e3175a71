// This file holds what a request says of its LoRA adapter besides its model.

package frontdoor

// keyLoRAPath is SGLang's per-request adapter: the name it loaded the
// adapter under (--lora-paths NAME=PATH), or a list with one per prompt.
const keyLoRAPath = "lora_path"

// loraPath returns the adapter the request's lora_path names, "" for none:
// a string, or the first of a list (a batch goes to one worker, routed by
// its first prompt). vLLM names adapters as models, which the router
// resolves (router.Resolve).
func (r *Request) loraPath() string {
	raw := r.top[keyLoRAPath]
	if len(raw) == 0 || isNull(raw) {
		return ""
	}
	if raw[0] == '[' {
		first, ok := firstElement(raw)
		if !ok || first == nil {
			return ""
		}
		raw = first
	}
	var s string
	if raw[0] != '"' || unmarshalString(raw, &s) != nil {
		return ""
	}
	return s
}
