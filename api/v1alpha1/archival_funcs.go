package v1alpha1

// DefaultJobsHistoryLimit is how many finished archive Jobs a store keeps when
// jobsHistoryLimit is unset.
const DefaultJobsHistoryLimit = 3

// JobsHistoryLimitOrDefault is jobsHistoryLimit with its default applied.
func (a *ArchivalSpec) JobsHistoryLimitOrDefault() int {
	if a.JobsHistoryLimit == nil || *a.JobsHistoryLimit < 1 {
		return DefaultJobsHistoryLimit
	}
	return int(*a.JobsHistoryLimit)
}

// ColdStorageEnabled reports whether runs write cold packages.
func (a *ArchivalSpec) ColdStorageEnabled() bool {
	return a.ColdStorage != nil && a.ColdStorage.Enabled
}
