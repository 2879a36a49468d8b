package config

import (
	"reflect"
	"slices"
)

// Variables are the names of the environment variables Load reads: each
// Config field's env tag, GATEWAY_ROUTES and GATEWAY_CONFIG_FILE, then each secret's _FILE variant. A
// deployment that sets any other name configures nothing; the deployment
// files' tests check theirs against this list. (A configuration file's
// sources name their own secret variables; those are not here.)
func Variables() []string {
	names := []string{"GATEWAY_ROUTES", "GATEWAY_CONFIG_FILE"}
	var files []string
	t := reflect.TypeFor[Config]()
	for i := range t.NumField() {
		f := t.Field(i)
		if name := f.Tag.Get("env"); name != "" && name != "-" {
			names = append(names, name)
			if f.Tag.Get("secret") == "true" {
				files = append(files, name+"_FILE")
			}
		}
	}
	return slices.Clip(append(names, files...))
}
