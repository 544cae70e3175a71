// This file holds the Jinja chat template engine: ardanlabs/jinja set up as transformers sets up Jinja2.

package tokenizer

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
)

// ErrTemplate is a chat template that does not compile, or that fails
// while rendering (raise_exception, a type error): the message is the
// template's.
var ErrTemplate = errors.New("chat template error")

// ChatTemplate is a model's Jinja chat template, compiled once; it is safe
// for concurrent use.
type ChatTemplate struct {
	src    string
	tmpl   *jinja.Template
	openai bool // content format: see detectContentFormat
	// builtin, when set, renders instead of tmpl (BuiltinChatTemplate).
	builtin Template
	name    string
	// Now is the clock of strftime_now (Llama 3.x puts today's date in
	// the prompt); nil means time.Now.
	Now func() time.Time
}

// NewChatTemplate compiles a Jinja chat template.
func NewChatTemplate(src string) (*ChatTemplate, error) {
	norm := normalizeTemplateSource(src)
	for _, m := range []string{"{%+", "+%}"} {
		if strings.Contains(norm, m) {
			return nil, fmt.Errorf("chat template: the %q whitespace modifier is not implemented: %w", m, ErrUnsupported)
		}
	}
	// ardanlabs/jinja's own tojson sorts keys and escapes <>& when given an
	// indent, and a template cannot override a built-in filter, so uses
	// are renamed to ours (an unknown filter is looked up in the render
	// scope). transformers' tojson is json.dumps(ensure_ascii=False).
	tmpl, err := jinja.Compile(tojsonRe.ReplaceAllString(norm, "|"+toJSONName))
	if err != nil {
		return nil, fmt.Errorf("chat template: %w: %w", ErrTemplate, err)
	}
	return &ChatTemplate{src: src, tmpl: tmpl, openai: detectContentFormat(norm)}, nil
}

// Source returns the template text.
func (c *ChatTemplate) Source() string { return c.src }

// normalizeTemplateSource does what Jinja2's lexer does to a template
// before anything else: newlines become "\n", and one trailing newline is
// dropped (keep_trailing_newline is false), which matters because
// chat_template.jinja files end with one.
func normalizeTemplateSource(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.TrimSuffix(s, "\n")
}

const toJSONName = "kvrouter_tojson"

var (
	tojsonRe    = regexp.MustCompile(`\|\s*tojson\b`)
	setFromRe   = regexp.MustCompile(`set\s+(\w+)\s*=\s*(\w+)\b`)
	forInRe     = regexp.MustCompile(`for\s+(\w+)(?:\s*,\s*\w+)?\s+in\s+(\w+)\b`)
	contentIter = `for\s+\w+(?:\s*,\s*\w+)?\s+in\s+%s\s*(?:\.\s*content\b|\[\s*['"]content['"]\s*\])`
)

// detectContentFormat is vLLM's choice between passing message content as
// a string (text parts joined by newlines) and as the list of OpenAI parts:
// the list when the template loops over a message's content, a message
// being a loop variable over messages or over a variable set from it.
// vLLM walks the Jinja AST; this follows the same assignments in the text.
func detectContentFormat(src string) bool {
	msgVars := map[string]bool{"messages": true}
	for changed := true; changed; {
		changed = false
		for _, m := range setFromRe.FindAllStringSubmatch(src, -1) {
			if msgVars[m[2]] && !msgVars[m[1]] {
				msgVars[m[1]], changed = true, true
			}
		}
	}
	for _, m := range forInRe.FindAllStringSubmatch(src, -1) {
		if !msgVars[m[2]] {
			continue
		}
		if regexp.MustCompile(fmt.Sprintf(contentIter, regexp.QuoteMeta(m[1]))).MatchString(src) {
			return true
		}
	}
	return false
}

// render runs the template on vars, with the filters and globals
// transformers adds.
func (c *ChatTemplate) render(vars map[string]jinja.Value) (out string, err error) {
	// Request content reaches the engine's internals; a panic there must
	// fail one request, not the router.
	defer func() {
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("chat template: %w: the engine failed: %v", ErrTemplate, r)
		}
	}()
	now := time.Now
	if c.Now != nil {
		now = c.Now
	}
	vars["strftime_now"] = jinja.NewCallable("strftime_now", func(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
		if len(args) != 1 || !args[0].IsString() {
			return jinja.Undefined(), fmt.Errorf("strftime_now: want one format string")
		}
		return jinja.NewString(strftime(now(), args[0].AsString())), nil
	})
	vars[toJSONName] = jinja.NewCallable("tojson", filterToJSON)
	out, err = c.tmpl.RenderValues(vars)
	if err != nil {
		return "", fmt.Errorf("chat template: %w: %w", ErrTemplate, err)
	}
	return out, nil
}

// strftime formats t with the C directives chat templates use.
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		pad := true
		if format[i] == '-' && i+1 < len(format) { // glibc: no padding
			pad = false
			i++
		}
		num := func(n, width int) {
			if pad {
				fmt.Fprintf(&b, "%0*d", width, n)
			} else {
				fmt.Fprintf(&b, "%d", n)
			}
		}
		switch format[i] {
		case 'd':
			num(t.Day(), 2)
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'm':
			num(int(t.Month()), 2)
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'y':
			num(t.Year()%100, 2)
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			num((t.Hour()+11)%12+1, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'p':
			b.WriteString(map[bool]string{true: "PM", false: "AM"}[t.Hour() >= 12])
		case 'j':
			num(t.YearDay(), 3)
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
