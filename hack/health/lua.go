package health

import (
	"context"
	"fmt"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// luaTimeout is Argo CD's limit for one health script run.
const luaTimeout = time.Second

// invalidHealthStatus is Argo CD's message when a script returns a status
// that is not a health status.
const invalidHealthStatus = "Lua returned an invalid health status"

// Lua runs an Argo CD health.lua script on obj the way Argo CD runs a script
// from argocd-cm without useOpenLibs (argo-cd util/lua/lua.go): only the
// package, base and table libraries and an os library cut down to time and
// date (no string library), a 1-second timeout, and the object as global obj.
func Lua(script string, obj map[string]any) (Verdict, error) {
	v := Verdict{Judge: JudgeArgoCD}
	obj, err := normalise(obj)
	if err != nil {
		return v, err
	}

	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.OsLibName, lua.OpenOs},
	} {
		if err := L.CallByParam(lua.P{Fn: L.NewFunction(lib.open), Protect: true}, lua.LString(lib.name)); err != nil {
			return v, fmt.Errorf("opening Lua library %q: %w", lib.name, err)
		}
	}
	restrictOs(L)

	ctx, cancel := context.WithTimeout(context.Background(), luaTimeout)
	defer cancel()
	L.SetContext(ctx)
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		return v, fmt.Errorf("running health.lua: %w", err)
	}

	ret := L.Get(-1)
	table, ok := ret.(*lua.LTable)
	if !ok {
		return v, fmt.Errorf("expect table output from Lua script, not %s", ret.Type())
	}
	out, _ := fromLua(table).(map[string]any)
	status, okStatus := out["status"].(string)
	message, okMessage := out["message"].(string)
	if (out["status"] != nil && !okStatus) || (out["message"] != nil && !okMessage) {
		return v, fmt.Errorf("health.lua returned a non-string status or message: %v", out)
	}
	switch status {
	case "Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown":
	default:
		status, message = "Unknown", invalidHealthStatus
	}
	v.Raw, v.Message, v.Health = status, message, fromArgo(status)
	return v, nil
}

// restrictOs leaves only os.time and os.date, like Argo CD's safe os library,
// both as the global os and for require("os").
func restrictOs(L *lua.LState) {
	full := L.GetGlobal(lua.OsLibName).(*lua.LTable)
	safe := L.NewTable()
	for _, name := range []string{"time", "date"} {
		safe.RawSetString(name, full.RawGetString(name))
	}
	L.SetGlobal(lua.OsLibName, safe)
	loaded := L.GetField(L.Get(lua.RegistryIndex), "_LOADED").(*lua.LTable)
	loaded.RawSetString(lua.OsLibName, safe)
}

// toLua converts a JSON-like Go value to Lua, as Argo CD's decodeValue does.
// Numbers become LNumber, so generation == observedGeneration compares numbers.
func toLua(L *lua.LState, value any) lua.LValue {
	switch v := value.(type) {
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case []any:
		t := L.CreateTable(len(v), 0)
		for _, item := range v {
			t.Append(toLua(L, item))
		}
		return t
	case map[string]any:
		t := L.CreateTable(0, len(v))
		for key, item := range v {
			t.RawSetString(key, toLua(L, item))
		}
		return t
	}
	return lua.LNil
}

// fromLua converts a Lua value back to Go: a table with only the keys 1..n
// becomes a slice, any other table a map keyed by the keys' string form.
func fromLua(value lua.LValue) any {
	switch v := value.(type) {
	case lua.LBool:
		return bool(v)
	case lua.LString:
		return string(v)
	case lua.LNumber:
		return float64(v)
	case *lua.LTable:
		if n := v.Len(); n > 0 && countKeys(v) == n {
			list := make([]any, 0, n)
			for i := 1; i <= n; i++ {
				list = append(list, fromLua(v.RawGetInt(i)))
			}
			return list
		}
		m := map[string]any{}
		v.ForEach(func(key, item lua.LValue) { m[key.String()] = fromLua(item) })
		return m
	case *lua.LNilType:
		return nil
	}
	return value.String()
}

func countKeys(t *lua.LTable) int {
	n := 0
	t.ForEach(func(lua.LValue, lua.LValue) { n++ })
	return n
}
