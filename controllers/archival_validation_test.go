package controllers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	memoryv1alpha1 "github.com/amemory/memory-operator/api/v1alpha1"
	"github.com/amemory/memory-operator/internal/memory"
)

// validArchival is an archival spec the API server accepts.
func validArchival() *memoryv1alpha1.ArchivalSpec {
	return &memoryv1alpha1.ArchivalSpec{Schedule: "0 3 * * *", Threshold: "0.05"}
}

func TestArchivalAdmissionRejectsInvalidSpecs(t *testing.T) {
	ns := newNamespace(t)
	cold := func(a *memoryv1alpha1.ArchivalSpec) *memoryv1alpha1.ArchivalColdStorage {
		a.ColdStorage = &memoryv1alpha1.ArchivalColdStorage{Enabled: true,
			Encryption: &memoryv1alpha1.SnapshotEncryption{Unencrypted: true}}
		return a.ColdStorage
	}
	const badSchedule = "schedule must be five cron fields"
	cases := []struct {
		name   string
		mutate func(*memoryv1alpha1.ArchivalSpec)
		want   string
	}{
		{"four cron fields", func(a *memoryv1alpha1.ArchivalSpec) { a.Schedule = "0 3 * *" }, badSchedule},
		{"six cron fields", func(a *memoryv1alpha1.ArchivalSpec) { a.Schedule = "0 0 3 * * *" }, badSchedule},
		{"unknown descriptor", func(a *memoryv1alpha1.ArchivalSpec) { a.Schedule = "@fortnightly" }, badSchedule},
		{"every without a duration", func(a *memoryv1alpha1.ArchivalSpec) { a.Schedule = "@every day" }, badSchedule},
		{"time zone prefix", func(a *memoryv1alpha1.ArchivalSpec) { a.Schedule = "CRON_TZ=Europe/Paris 0 3 * * *" }, badSchedule},
		{"prose", func(a *memoryv1alpha1.ArchivalSpec) { a.Schedule = "every night" }, badSchedule},
		{"empty schedule", func(a *memoryv1alpha1.ArchivalSpec) { a.Schedule = "" }, "spec.archival.schedule"},
		{"negative threshold", func(a *memoryv1alpha1.ArchivalSpec) { a.Threshold = "-0.1" }, "threshold must be a non-negative decimal number"},
		{"threshold not a number", func(a *memoryv1alpha1.ArchivalSpec) { a.Threshold = "low" }, "threshold must be a non-negative decimal number"},
		{"threshold in exponent form", func(a *memoryv1alpha1.ArchivalSpec) { a.Threshold = "5e-2" }, "threshold must be a non-negative decimal number"},
		{"threshold with a trailing dot", func(a *memoryv1alpha1.ArchivalSpec) { a.Threshold = "1." }, "threshold must be a non-negative decimal number"},
		{"empty threshold", func(a *memoryv1alpha1.ArchivalSpec) { a.Threshold = "" }, "threshold must be a non-negative decimal number"},
		{"unknown memory type", func(a *memoryv1alpha1.ArchivalSpec) {
			a.HalfLives = map[string]memoryv1alpha1.HalfLife{"episodic": "1h", "emotional": "1h"}
		}, "halfLives keys are memory types"},
		{"capitalised memory type", func(a *memoryv1alpha1.ArchivalSpec) {
			a.HalfLives = map[string]memoryv1alpha1.HalfLife{"Working": "1h"}
		}, "halfLives keys are memory types"},
		{"half-life in days", func(a *memoryv1alpha1.ArchivalSpec) {
			a.HalfLives = map[string]memoryv1alpha1.HalfLife{"episodic": "30d"}
		}, "each half-life is a positive duration"},
		{"half-life in words", func(a *memoryv1alpha1.ArchivalSpec) {
			a.HalfLives = map[string]memoryv1alpha1.HalfLife{"episodic": "forever"}
		}, "each half-life is a positive duration"},
		{"zero half-life", func(a *memoryv1alpha1.ArchivalSpec) {
			a.HalfLives = map[string]memoryv1alpha1.HalfLife{"working": "0s"}
		}, "each half-life is a positive duration"},
		{"negative half-life", func(a *memoryv1alpha1.ArchivalSpec) {
			a.HalfLives = map[string]memoryv1alpha1.HalfLife{"semantic": "-1h"}
		}, "each half-life is a positive duration"},
		{"deleteAfter without cold storage", func(a *memoryv1alpha1.ArchivalSpec) {
			a.ColdStorage = &memoryv1alpha1.ArchivalColdStorage{DeleteAfter: &metav1.Duration{Duration: 90 * 24 * time.Hour}}
		}, "coldStorage.deleteAfter needs coldStorage.enabled"},
		{"deleteAfter with cold storage disabled", func(a *memoryv1alpha1.ArchivalSpec) {
			c := cold(a)
			c.Enabled = false
			c.DeleteAfter = &metav1.Duration{Duration: time.Hour}
		}, "coldStorage.deleteAfter needs coldStorage.enabled"},
		{"zero deleteAfter", func(a *memoryv1alpha1.ArchivalSpec) {
			cold(a).DeleteAfter = &metav1.Duration{}
		}, "deleteAfter is a positive duration"},
		{"cold storage without encryption", func(a *memoryv1alpha1.ArchivalSpec) {
			cold(a).Encryption = nil
		}, "coldStorage.enabled needs encryption.keySecret, or encryption.unencrypted: true"},
		{"cold storage with key and unencrypted", func(a *memoryv1alpha1.ArchivalSpec) {
			cold(a).Encryption.KeySecret = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "k"}, Key: "key"}
		}, "set encryption.keySecret, or encryption.unencrypted: true"},
		{"jobsHistoryLimit zero", func(a *memoryv1alpha1.ArchivalSpec) { a.JobsHistoryLimit = new(int32) }, "spec.archival.jobsHistoryLimit"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := validStore(ns, fmt.Sprintf("invalid-%d", i))
			s.Spec.Archival = validArchival()
			tc.mutate(s.Spec.Archival)
			err := k8sClient.Create(context.Background(), s)
			g := NewWithT(t)
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.want))
		})
	}
}

// A deleteAfter the API server stored but Go cannot parse would make the whole store
// unreadable to the operator: admission refuses it (sent as kubectl would: the Go type
// cannot even hold it).
func TestArchivalAdmissionRejectsUnparseableDeleteAfter(t *testing.T) {
	ns := newNamespace(t)
	for i, tc := range []struct {
		name  string
		field []string
		value any
		want  string
	}{
		{"deleteAfter in words", []string{"spec", "archival", "coldStorage", "deleteAfter"}, "90 days", "deleteAfter is a positive duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			s := validStore(ns, fmt.Sprintf("unparseable-%d", i))
			s.Spec.Archival = validArchival()
			s.Spec.Archival.ColdStorage = &memoryv1alpha1.ArchivalColdStorage{Enabled: true,
				Encryption: &memoryv1alpha1.SnapshotEncryption{Unencrypted: true}}
			obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
			g.Expect(err).NotTo(HaveOccurred())
			u := &unstructured.Unstructured{Object: obj}
			u.SetGroupVersionKind(memoryv1alpha1.GroupVersion.WithKind("MemoryStore"))
			g.Expect(unstructured.SetNestedField(u.Object, tc.value, tc.field...)).To(Succeed())
			err = k8sClient.Create(context.Background(), u)
			g.Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring(tc.want))
		})
	}
}

func TestArchivalAdmissionAcceptsValidSpecs(t *testing.T) {
	ns := newNamespace(t)
	cases := []struct {
		name   string
		mutate func(*memoryv1alpha1.ArchivalSpec)
	}{
		{"five fields", func(a *memoryv1alpha1.ArchivalSpec) { a.Schedule = "*/15 2-5 1,15 JAN-DEC MON-FRI" }},
		{"descriptor", func(a *memoryv1alpha1.ArchivalSpec) { a.Schedule = "@daily" }},
		{"every", func(a *memoryv1alpha1.ArchivalSpec) { a.Schedule = "@every 1h30m" }},
		{"zero threshold", func(a *memoryv1alpha1.ArchivalSpec) { a.Threshold = "0" }},
		{"threshold above one", func(a *memoryv1alpha1.ArchivalSpec) { a.Threshold = "2.5" }},
		{"every half-life and cold storage", func(a *memoryv1alpha1.ArchivalSpec) {
			a.HalfLives = map[string]memoryv1alpha1.HalfLife{"working": "2h", "episodic": "1440h", "semantic": "1h30m", "procedural": "9000h"}
			a.DryRun = true
			a.ColdStorage = &memoryv1alpha1.ArchivalColdStorage{Enabled: true,
				DeleteAfter: &metav1.Duration{Duration: 2160 * time.Hour},
				Encryption: &memoryv1alpha1.SnapshotEncryption{KeySecret: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "cold-key"}, Key: "key"}}}
		}},
		{"cold storage declared but off", func(a *memoryv1alpha1.ArchivalSpec) {
			a.ColdStorage = &memoryv1alpha1.ArchivalColdStorage{}
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := validStore(ns, fmt.Sprintf("valid-%d", i))
			s.Spec.Archival = validArchival()
			tc.mutate(s.Spec.Archival)
			g := NewWithT(t)
			g.Expect(k8sClient.Create(context.Background(), s)).To(Succeed())
			got := getStore(g, client.ObjectKeyFromObject(s))
			g.Expect(got.Spec.Archival.JobsHistoryLimitOrDefault()).To(Equal(memoryv1alpha1.DefaultJobsHistoryLimit))
			g.Expect(*got.Spec.Archival.JobsHistoryLimit).To(Equal(int32(memoryv1alpha1.DefaultJobsHistoryLimit)), "defaulted")
		})
	}
}

// The acme sample, with its archival, is accepted as it is and means what its comments
// say.
func TestArchivalSampleIsValid(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "config", "samples", "memory_v1alpha1_memorystore.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sample := &memoryv1alpha1.MemoryStore{}
	if err := yaml.NewYAMLOrJSONDecoder(f, 4096).Decode(sample); err != nil {
		t.Fatal(err)
	}
	sample.Namespace = newNamespace(t)
	create(t, sample)
	g := NewWithT(t)
	a := getStore(g, client.ObjectKeyFromObject(sample)).Spec.Archival
	g.Expect(a).NotTo(BeNil())
	threshold, halfLives, err := archivalParameters(a)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(threshold).To(Equal(0.05))
	g.Expect(halfLives[memory.Episodic]).To(Equal(60 * 24 * time.Hour))
	g.Expect(halfLives[memory.Working]).To(Equal(memory.DefaultHalfLives()[memory.Working]))
	g.Expect(a.ColdStorageEnabled()).To(BeTrue())
	g.Expect(a.ColdStorage.DeleteAfter.Duration).To(Equal(90 * 24 * time.Hour))
	_, err = parseSchedule(string(a.Schedule))
	g.Expect(err).NotTo(HaveOccurred())
}
