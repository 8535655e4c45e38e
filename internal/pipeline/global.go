package pipeline

// WithStoreTables says which of the program's tables the processor's
// database holds (executor.Program.AttachSome): the others are in another store
// (an App in a group keeps its global tables in a store of their own,
// docs/design.md §20). Without it the database holds them all.
func WithStoreTables(keep func(table string) bool) ProcessorOption {
	return func(o *processorOptions) { o.tables = keep }
}
