-- Argo CD health of a memory.amemory.io MemoryRestore, from what the operator writes:
-- metadata.deletionTimestamp, status.observedGeneration and the conditions
-- Reconciling, Stalled and Ready, checked in kstatus' order (so Argo CD, Flux
-- and kstatus agree). Uses no string library: argocd-cm scripts lack it.
-- Never returns Suspended: Argo CD's sync waves treat Suspended as still
-- running (gitops-engine getOperationPhase), so it would block later waves.
local hs = { status = "Progressing" }
local meta = obj.metadata

if meta.deletionTimestamp ~= nil then
  hs.message = "Pending deletion"
  if meta.finalizers ~= nil and #meta.finalizers > 0 then
    hs.message = hs.message .. "; blocked by finalizers: " .. table.concat(meta.finalizers, ", ")
  end
  return hs
end

local status = obj.status
if status == nil or status.observedGeneration == nil or status.observedGeneration ~= meta.generation then
  hs.message = "Waiting for the operator to observe generation " .. tostring(meta.generation)
  return hs
end

local conditions = {}
for _, c in ipairs(status.conditions or {}) do
  conditions[c.type] = c
end
local reconciling, stalled, ready = conditions.Reconciling, conditions.Stalled, conditions.Ready

if reconciling ~= nil and reconciling.status == "True" then
  hs.message = reconciling.message
  if hs.message == nil or hs.message == "" then
    hs.message = reconciling.reason
  end
  return hs
end

if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = (stalled.reason or "") .. ": " .. (stalled.message or "")
  return hs
end

if ready ~= nil then
  if ready.status == "True" then
    hs.status = "Healthy"
  end
  hs.message = ready.message
  return hs
end

hs.message = "Waiting for the operator to report Ready"
return hs
