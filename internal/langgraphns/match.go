package langgraphns

// Wildcard is the label that matches any one label in a list_namespaces prefix or
// suffix (LangGraph's MatchCondition).
const Wildcard = "*"

// MatchPrefix reports whether ns starts with the labels of pattern, a Wildcard label
// matching any one label: LangGraph's list_namespaces prefix condition
// (langgraph/store/memory, _does_match). An empty pattern matches every namespace.
func MatchPrefix(ns, pattern []string) bool {
	if len(ns) < len(pattern) {
		return false
	}
	return matchLabels(ns[:len(pattern)], pattern)
}

// MatchSuffix reports whether ns ends with the labels of pattern, a Wildcard label
// matching any one label: LangGraph's list_namespaces suffix condition.
func MatchSuffix(ns, pattern []string) bool {
	if len(ns) < len(pattern) {
		return false
	}
	return matchLabels(ns[len(ns)-len(pattern):], pattern)
}

func matchLabels(labels, pattern []string) bool {
	for i, p := range pattern {
		if p != Wildcard && labels[i] != p {
			return false
		}
	}
	return true
}
