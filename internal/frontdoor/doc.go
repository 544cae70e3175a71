// Package frontdoor is the router service's OpenAI-compatible HTTP front
// door: it reads a request, strips the client's hints, tokenizes it (chat
// template included), asks the routing decision core for a target, attaches
// the hint and the DP rank where the target's engine reads them, and
// proxies the request there, passing streams through as they come and
// retrying once elsewhere when the first worker refuses the connection.
package frontdoor
