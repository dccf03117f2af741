package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/gateway"
)

// The gateway of a store: its keys Secret, Deployment and Service, the gateway entries
// of the connection Secret, status.gateway and the GatewayReady condition. The gateway
// is a step after provisioning, and never changes the store's Ready: agents that use
// the connection Secret's DSN, and the store's Jobs, do not wait for gateway pods.

// reconcileGateway brings the gateway to what spec.gateway declares, once the store is
// provisioned (info is what provisioning resolved). A configuration the gateway would
// refuse, or a TLS Secret that is not there, changes nothing already running: the
// condition says why, and a fix (spec or Secret) is picked up by the watches.
func (r *MemoryStoreReconciler) reconcileGateway(ctx context.Context, store *memoryv1alpha1.MemoryStore, info connectionInfo) (ctrl.Result, error) {
	if !store.GatewayEnabled() {
		return ctrl.Result{}, r.removeGateway(ctx, store)
	}
	if r.GatewayImage == "" {
		return r.gatewayFailed(store, stepErrorf(memoryv1alpha1.ReasonNotConfigured,
			"The operator has no image for the gateway: start it with --worker-image or $WORKER_IMAGE"))
	}
	if err := validateGatewaySpec(store); err != nil {
		return r.gatewayFailed(store, err)
	}
	var milvusAddress string
	if info.backend.milvus != nil {
		milvusAddress = info.backend.milvus.Address
	}
	cfg, err := gatewayConfig(store, milvusAddress)
	if err != nil {
		return r.gatewayFailed(store, err)
	}
	tls, err := r.gatewayTLSSecret(ctx, store)
	if err != nil {
		return r.gatewayFailed(store, err)
	}
	keysSecret, err := r.ensureGatewayKeys(ctx, store)
	if err != nil {
		return r.gatewayFailed(store, err)
	}
	digest, err := r.gatewaySecretDigest(ctx, store, info)
	if err != nil {
		return r.gatewayFailed(store, err)
	}
	dep, err := r.applyGatewayDeployment(ctx, store, buildGatewayDeployment(store, cfg,
		gatewayInputs{Image: r.GatewayImage, SecretDigest: digest}))
	if err != nil {
		return r.gatewayFailed(store, err)
	}
	if err := r.applyGatewayService(ctx, store); err != nil {
		return r.gatewayFailed(store, err)
	}
	g := store.Spec.Gateway
	connKey := g.ConnectionKeyOrDefault()
	if err := r.setGatewayConnection(ctx, store, gatewayURL(store), string(keysSecret.Data[connKey])); err != nil {
		return ctrl.Result{}, err
	}

	status := &memoryv1alpha1.GatewayStatus{
		URL:           gatewayURL(store),
		GRPCAddress:   gatewayGRPCAddress(store),
		ConnectionKey: connKey,
		KeysSecret:    &memoryv1alpha1.SecretVersion{Name: keysSecret.Name, Version: keysSecret.ResourceVersion},
		TLSSecret:     tls,
	}
	for _, k := range g.KeysOrDefault() {
		status.Keys = append(status.Keys, k.Name)
	}
	store.Status.Gateway = status
	observeGatewayDeployment(store, dep)
	return ctrl.Result{}, nil
}

// gatewayWhileNotReady is the gateway step of a store whose provisioning stopped short:
// a disabled gateway is still removed (that needs no backend); an enabled one is left
// as it is and only observed, since its configuration comes from what provisioning
// resolves.
func (r *MemoryStoreReconciler) gatewayWhileNotReady(ctx context.Context, store *memoryv1alpha1.MemoryStore) error {
	if !store.GatewayEnabled() {
		return r.removeGateway(ctx, store)
	}
	dep := &appsv1.Deployment{}
	err := r.Get(ctx, types.NamespacedName{Namespace: store.Namespace, Name: store.GatewayName()}, dep)
	switch {
	case apierrors.IsNotFound(err) || (err == nil && !metav1.IsControlledBy(dep, store)):
		store.SetCondition(memoryv1alpha1.ConditionGatewayReady, metav1.ConditionFalse, memoryv1alpha1.ReasonStoreNotReady,
			"The gateway is deployed once the store is provisioned")
		return nil
	case err != nil:
		return err
	}
	if store.Status.Gateway != nil {
		observeGatewayDeployment(store, dep)
	}
	return nil
}

// gatewayFailed records a failed gateway step on GatewayReady. Failures with a reason
// wait for a fix that a watch delivers (spec, Secret); anything else (the API server)
// is returned for the work queue to retry, GatewayReady left as it was.
func (r *MemoryStoreReconciler) gatewayFailed(store *memoryv1alpha1.MemoryStore, err error) (ctrl.Result, error) {
	var se *stepError
	if !errors.As(err, &se) {
		return ctrl.Result{}, err
	}
	store.SetCondition(memoryv1alpha1.ConditionGatewayReady, metav1.ConditionFalse, se.reason, se.message)
	return ctrl.Result{}, nil
}

// observeGatewayDeployment sets GatewayReady and the replica counts from the
// Deployment's status.
func observeGatewayDeployment(store *memoryv1alpha1.MemoryStore, dep *appsv1.Deployment) {
	want := store.Spec.Gateway.ReplicasOrDefault()
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}
	if s := store.Status.Gateway; s != nil {
		s.Replicas, s.ReadyReplicas = want, dep.Status.ReadyReplicas
	}
	status, reason, message := gatewayReadiness(dep, want, gatewayURL(store))
	store.SetCondition(memoryv1alpha1.ConditionGatewayReady, status, reason, message)
}

// gatewayReadiness is GatewayReady as the Deployment's status tells it: True once the
// Deployment controller has seen the current spec and every declared replica is up to
// date and ready, with no old one left.
func gatewayReadiness(dep *appsv1.Deployment, want int32, url string) (metav1.ConditionStatus, string, string) {
	st := dep.Status
	for _, c := range st.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
			return metav1.ConditionFalse, memoryv1alpha1.ReasonRolloutStuck,
				fmt.Sprintf("Deployment %s: %s (%d of %d replicas ready)", dep.Name, c.Message, st.ReadyReplicas, want)
		}
	}
	switch {
	case st.ObservedGeneration < dep.Generation:
		return metav1.ConditionFalse, memoryv1alpha1.ReasonProgressing,
			fmt.Sprintf("Deployment %s is rolling out (%d of %d replicas ready)", dep.Name, st.ReadyReplicas, want)
	case want == 0:
		return metav1.ConditionFalse, memoryv1alpha1.ReasonScaledToZero,
			fmt.Sprintf("spec.gateway.replicas is 0: nothing answers at %s", url)
	case st.UpdatedReplicas < want || st.ReadyReplicas < want || st.Replicas > st.UpdatedReplicas:
		return metav1.ConditionFalse, memoryv1alpha1.ReasonProgressing,
			fmt.Sprintf("Deployment %s: %d of %d replicas ready, %d up to date", dep.Name, st.ReadyReplicas, want, st.UpdatedReplicas)
	}
	return metav1.ConditionTrue, memoryv1alpha1.ReasonDeployed,
		fmt.Sprintf("%d of %d replicas ready at %s", st.ReadyReplicas, want, url)
}

// gatewayTLSSecret checks the TLS Secret (it must exist with tls.crt and tls.key) and
// returns the version observed; nil without TLS. Its content is never read into status.
func (r *MemoryStoreReconciler) gatewayTLSSecret(ctx context.Context, store *memoryv1alpha1.MemoryStore) (*memoryv1alpha1.SecretVersion, error) {
	t := store.Spec.Gateway.TLS
	if t == nil {
		return nil, nil
	}
	secret := &corev1.Secret{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: store.Namespace, Name: t.SecretName}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, stepErrorf(memoryv1alpha1.ReasonTLSSecretMissing,
				"TLS Secret %s/%s (spec.gateway.tls.secretName) not found; the gateway is deployed once it exists", store.Namespace, t.SecretName)
		}
		return nil, err
	}
	var missing []string
	for _, k := range []string{corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
		if len(secret.Data[k]) == 0 {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, stepErrorf(memoryv1alpha1.ReasonTLSSecretInvalid,
			"TLS Secret %s/%s has no %s (a kubernetes.io/tls Secret has tls.crt and tls.key)", store.Namespace, t.SecretName, strings.Join(missing, " or "))
	}
	return &memoryv1alpha1.SecretVersion{Name: secret.Name, Version: secret.ResourceVersion}, nil
}

// ensureGatewayKeys creates or updates the keys Secret (see gatewayKeyData): existing
// keys are kept, new names get a new key, removed names are dropped. The Secret is the
// store's; one of the same name that is not is never touched.
func (r *MemoryStoreReconciler) ensureGatewayKeys(ctx context.Context, store *memoryv1alpha1.MemoryStore) (*corev1.Secret, error) {
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: store.Namespace, Name: store.GatewayKeysSecretName()}}
	var change gatewayKeyChange
	op, err := controllerutil.CreateOrPatch(ctx, r.Client, secret, func() error {
		if secret.ResourceVersion != "" && !metav1.IsControlledBy(secret, store) {
			return stepErrorf(memoryv1alpha1.ReasonNameConflict,
				"Secret %s/%s exists and is not managed by this MemoryStore; the gateway's keys need that name", store.Namespace, secret.Name)
		}
		data, c, err := gatewayKeyData(store.Spec.Gateway.KeysOrDefault(), secret.Data, gateway.GenerateKey)
		if err != nil {
			return err
		}
		change = c
		if secret.Labels == nil {
			secret.Labels = map[string]string{}
		}
		maps.Copy(secret.Labels, gatewayLabels(store))
		secret.Type = corev1.SecretTypeOpaque
		secret.Data = data
		return controllerutil.SetControllerReference(store, secret, r.Scheme)
	})
	if err != nil {
		return nil, err
	}
	if op == controllerutil.OperationResultCreated {
		r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "SecretCreated", "Gateway", "Created gateway keys Secret %s", secret.Name)
	}
	if op != controllerutil.OperationResultNone {
		for _, name := range change.Added {
			r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "GatewayKeyCreated", "Gateway", "Generated gateway API key %s", name)
		}
		for _, name := range change.Removed {
			r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "GatewayKeyRemoved", "Gateway", "Removed gateway API key %s; it no longer authenticates", name)
		}
	}
	return secret, nil
}

// gatewaySecretDigest digests the secret values the gateway reads from its
// environment: the store role's URI and the embedder's token.
func (r *MemoryStoreReconciler) gatewaySecretDigest(ctx context.Context, store *memoryv1alpha1.MemoryStore, info connectionInfo) (string, error) {
	values := []string{agentURI(info)}
	if e := servingEmbedder(store); e.Type == memoryv1alpha1.EmbedderOpenAI && e.APIKeySecret != nil {
		v, err := secretStrings(ctx, r.APIReader, store.Namespace, e.APIKeySecret.Name, e.APIKeySecret.Key)
		if err != nil {
			return "", err
		}
		values = append(values, v[0])
	}
	return secretDigest(values...), nil
}

// applyGatewayDeployment creates the Deployment, or updates it when what the operator
// asks of it changed (its spec-hash annotation) or someone changed a field the
// operator sets. It returns the Deployment as the API server has it.
func (r *MemoryStoreReconciler) applyGatewayDeployment(ctx context.Context, store *memoryv1alpha1.MemoryStore, desired *appsv1.Deployment) (*appsv1.Deployment, error) {
	hash := specHash(desired.Spec)
	desired.Annotations = map[string]string{gatewaySpecHashAnnotation: hash}
	existing := &appsv1.Deployment{}
	err := r.Get(ctx, client.ObjectKeyFromObject(desired), existing)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Create(ctx, desired); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return nil, nameConflict("Deployment", desired)
			}
			return nil, err
		}
		r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "GatewayCreated", "Gateway", "Created gateway Deployment %s", desired.Name)
		return desired, nil
	case err != nil:
		return nil, err
	case !metav1.IsControlledBy(existing, store):
		return nil, nameConflict("Deployment", desired)
	}
	labelsOK := true
	for k, v := range desired.Labels {
		labelsOK = labelsOK && existing.Labels[k] == v
	}
	if labelsOK && existing.Annotations[gatewaySpecHashAnnotation] == hash && equality.Semantic.DeepDerivative(desired.Spec, existing.Spec) {
		return existing, nil
	}
	patch := client.MergeFrom(existing.DeepCopy())
	if existing.Labels == nil {
		existing.Labels = map[string]string{}
	}
	maps.Copy(existing.Labels, desired.Labels)
	if existing.Annotations == nil {
		existing.Annotations = map[string]string{}
	}
	existing.Annotations[gatewaySpecHashAnnotation] = hash
	existing.Spec = desired.Spec
	if err := r.Patch(ctx, existing, patch); err != nil {
		return nil, err
	}
	r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "GatewayUpdated", "Gateway", "Updated gateway Deployment %s", desired.Name)
	return existing, nil
}

// applyGatewayService creates or updates the Service. Only the fields the operator
// sets are touched: the cluster IP and, for NodePort and LoadBalancer, the node ports
// the API server allocated stay; annotations from spec.gateway.service are applied and
// the ones it no longer lists removed, others' left alone.
func (r *MemoryStoreReconciler) applyGatewayService(ctx context.Context, store *memoryv1alpha1.MemoryStore) error {
	g := store.Spec.Gateway
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: store.Namespace, Name: store.GatewayName()}}
	op, err := controllerutil.CreateOrPatch(ctx, r.Client, svc, func() error {
		if svc.ResourceVersion != "" && !metav1.IsControlledBy(svc, store) {
			return nameConflict("Service", svc)
		}
		if svc.Labels == nil {
			svc.Labels = map[string]string{}
		}
		maps.Copy(svc.Labels, gatewayLabels(store))
		applyManagedAnnotations(svc, serviceAnnotations(g))
		svc.Spec.Type = g.ServiceTypeOrDefault()
		svc.Spec.Selector = gatewayLabels(store)
		ports := gatewayServicePorts(store)
		if svc.Spec.Type != corev1.ServiceTypeClusterIP {
			for i := range ports {
				for _, old := range svc.Spec.Ports {
					if old.Port == ports[i].Port {
						ports[i].NodePort = old.NodePort
					}
				}
			}
		}
		svc.Spec.Ports = ports
		return controllerutil.SetControllerReference(store, svc, r.Scheme)
	})
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nameConflict("Service", svc)
		}
		return err
	}
	if op == controllerutil.OperationResultCreated {
		r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "GatewayServiceCreated", "Gateway", "Created gateway Service %s", svc.Name)
	}
	return nil
}

func serviceAnnotations(g *memoryv1alpha1.GatewaySpec) map[string]string {
	if g.Service == nil {
		return nil
	}
	return g.Service.Annotations
}

// applyManagedAnnotations sets want on obj and removes the annotations it set before
// that want no longer has; it records which are its own in gatewayServiceAnnotationsKey.
func applyManagedAnnotations(obj metav1.Object, want map[string]string) {
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	if prev := ann[gatewayServiceAnnotationsKey]; prev != "" {
		for _, k := range strings.Split(prev, ",") {
			if _, ok := want[k]; !ok {
				delete(ann, k)
			}
		}
	}
	delete(ann, gatewayServiceAnnotationsKey)
	keys := slices.Sorted(maps.Keys(want))
	for _, k := range keys {
		ann[k] = want[k]
	}
	if len(keys) > 0 {
		ann[gatewayServiceAnnotationsKey] = strings.Join(keys, ",")
	}
	obj.SetAnnotations(ann)
}

func nameConflict(kind string, obj client.Object) error {
	return stepErrorf(memoryv1alpha1.ReasonNameConflict,
		"%s %s/%s exists and is not managed by this MemoryStore; the gateway needs that name", kind, obj.GetNamespace(), obj.GetName())
}

// setGatewayConnection sets the connection Secret's gatewayURL and gatewayKey, or
// removes them when url is empty.
func (r *MemoryStoreReconciler) setGatewayConnection(ctx context.Context, store *memoryv1alpha1.MemoryStore, url, key string) error {
	secret := &corev1.Secret{}
	err := r.Get(ctx, types.NamespacedName{Namespace: store.Namespace, Name: store.ConnectionSecretNameOrDefault()}, secret)
	if apierrors.IsNotFound(err) || (err == nil && !metav1.IsControlledBy(secret, store)) {
		return nil // nothing of ours to change: provisioning writes it
	}
	if err != nil {
		return err
	}
	want := map[string]string{keyGatewayURL: url, keyGatewayKey: key, keyGatewayGRPC: gatewayGRPCAddress(store)}
	patch := client.MergeFrom(secret.DeepCopy())
	changed := false
	for k, v := range want {
		switch {
		case url == "" && secret.Data[k] != nil:
			delete(secret.Data, k)
			changed = true
		case url != "" && string(secret.Data[k]) != v:
			if secret.Data == nil {
				secret.Data = map[string][]byte{}
			}
			secret.Data[k] = []byte(v)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return r.Patch(ctx, secret, patch)
}

// removeGateway deletes the gateway's Deployment, Service and keys Secret (those that
// are this store's), the gateway entries of the connection Secret, status.gateway and
// GatewayReady.
func (r *MemoryStoreReconciler) removeGateway(ctx context.Context, store *memoryv1alpha1.MemoryStore) error {
	removed, err := r.deleteGatewayObjects(ctx, store)
	if err != nil {
		return err
	}
	// A provisioned store's connection Secret loses the entries when it is written
	// (ensureConnectionSecret keeps them only while the gateway is enabled); this is
	// for a store that is not provisioned, or a removal cut short.
	if removed || store.Status.Gateway != nil {
		if err := r.setGatewayConnection(ctx, store, "", ""); err != nil {
			return err
		}
	}
	if removed {
		r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "GatewayRemoved", "Gateway",
			"Removed the gateway %s and its keys: spec.gateway is not enabled", store.GatewayName())
	}
	store.Status.Gateway = nil
	meta.RemoveStatusCondition(&store.Status.Conditions, memoryv1alpha1.ConditionGatewayReady)
	return nil
}

// deleteGatewayObjects deletes the gateway's objects that are this store's and reports
// whether there were any.
func (r *MemoryStoreReconciler) deleteGatewayObjects(ctx context.Context, store *memoryv1alpha1.MemoryStore) (bool, error) {
	removed := false
	objects := []struct {
		obj    client.Object
		reader client.Reader
	}{
		{&appsv1.Deployment{}, r.Client},
		{&corev1.Service{}, r.Client},
		{&corev1.Secret{}, r.APIReader}, // Secrets are not cached
	}
	for _, o := range objects {
		name := store.GatewayName()
		if _, ok := o.obj.(*corev1.Secret); ok {
			name = store.GatewayKeysSecretName()
		}
		err := o.reader.Get(ctx, types.NamespacedName{Namespace: store.Namespace, Name: name}, o.obj)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return removed, err
		case !metav1.IsControlledBy(o.obj, store):
			continue
		}
		if err := r.Delete(ctx, o.obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return removed, err
		}
		removed = true
	}
	return removed, nil
}

// emitGatewayTransitions announces changes of GatewayReady: Normal when it becomes
// True, Warning for a failure that needs a fix.
func (r *MemoryStoreReconciler) emitGatewayTransitions(original, store *memoryv1alpha1.MemoryStore) {
	before := meta.FindStatusCondition(original.Status.Conditions, memoryv1alpha1.ConditionGatewayReady)
	after := meta.FindStatusCondition(store.Status.Conditions, memoryv1alpha1.ConditionGatewayReady)
	if after == nil || (before != nil && before.Status == after.Status && before.Reason == after.Reason) {
		return
	}
	switch after.Reason {
	case memoryv1alpha1.ReasonDeployed:
		r.Recorder.Eventf(store, nil, corev1.EventTypeNormal, "GatewayReady", "Gateway", "%s", after.Message)
	case memoryv1alpha1.ReasonProgressing, memoryv1alpha1.ReasonStoreNotReady, memoryv1alpha1.ReasonScaledToZero:
	default:
		r.Recorder.Eventf(store, nil, corev1.EventTypeWarning, after.Reason, "Gateway", "%s", after.Message)
	}
}

// gatewayDeploymentChanged lets through the Deployment events that can change what the
// store reports (GatewayReady, ready replicas) or that undo the operator's spec, not
// every status heartbeat of a rollout.
var gatewayDeploymentChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		before, ok1 := e.ObjectOld.(*appsv1.Deployment)
		after, ok2 := e.ObjectNew.(*appsv1.Deployment)
		if !ok1 || !ok2 {
			return true
		}
		return before.Generation != after.Generation ||
			!equality.Semantic.DeepEqual(before.Labels, after.Labels) ||
			!equality.Semantic.DeepEqual(before.Annotations, after.Annotations) ||
			!equality.Semantic.DeepEqual(deploymentReadiness(before), deploymentReadiness(after))
	},
}

// deploymentReadiness is the part of a Deployment's status gatewayReadiness reads.
func deploymentReadiness(d *appsv1.Deployment) []string {
	st := d.Status
	out := []string{fmt.Sprint(st.ObservedGeneration, st.Replicas, st.UpdatedReplicas, st.ReadyReplicas)}
	for _, c := range st.Conditions {
		if c.Type == appsv1.DeploymentProgressing {
			out = append(out, string(c.Status)+"/"+c.Reason)
		}
	}
	return out
}
