// Package tokcheck checks that the router tokenizes as the engines do. One
// token of difference and every block hash after it differs: the router
// then sees no cached prefix anywhere and routes blind, with nothing else
// to tell. So, for every model, at start and every few minutes, a fixed
// prompt and a fixed chat are tokenized both by the router's own tokenizer
// and by one of the model's engines (POST /tokenize), and the first
// position where the ids differ is logged, exported as the gauge
// kvrouter_tokenizer_mismatch{model} and shown in /debug/workers.
//
// With the engines' own /tokenize as the router's tokenizer there is
// nothing to compare; the check then makes sure the engines answer it, and
// says when they cannot render chats (SGLang's /tokenize takes a prompt
// only), since such chats are routed on load alone.
package tokcheck
