package jsonguard

// Object reports whether the top-level value is an object.
func (d *Doc) Object() bool { return d.object }
