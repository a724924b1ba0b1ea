// The floor of benchmarks/webhook_apiserver.py: an admission webhook in Go's net/http, the cheapest server we
// know how to write, so that what the apiserver measures for it is the apiserver's own share of a webhook call.
// It decodes the AdmissionReview, answers under the request's uid with a fixed patch, and does nothing else.
//
//	floor-webhook ADDRESS CERT_FILE KEY_FILE
package main

import (
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
)

// The same schedulerName as the other servers set, and a label that tells the benchmark this server answered.
var patch = []byte(`[{"op":"add","path":"/spec/schedulerName","value":"gpu-scheduler"},` +
	`{"op":"add","path":"/metadata/labels/served-by","value":"go-floor"}]`)

type review struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Request    *reviewRequest `json:"request,omitempty"`
	Response   *reviewAnswer  `json:"response,omitempty"`
}

type reviewRequest struct {
	UID string `json:"uid"`
}

type reviewAnswer struct {
	UID       string `json:"uid"`
	Allowed   bool   `json:"allowed"`
	PatchType string `json:"patchType"`
	Patch     []byte `json:"patch"`
}

func mutate(w http.ResponseWriter, r *http.Request) {
	var in review
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Request == nil {
		http.Error(w, fmt.Sprintf("not an AdmissionReview request: %v", err), http.StatusBadRequest)
		return
	}
	out := review{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview",
		Response: &reviewAnswer{UID: in.Request.UID, Allowed: true, PatchType: "JSONPatch", Patch: patch}}
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(out); err != nil {
		log.Printf("writing the answer: %v", err)
	}
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: floor-webhook ADDRESS CERT_FILE KEY_FILE")
		os.Exit(2)
	}
	http.HandleFunc("/mutate", mutate)
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	log.Fatal(http.ListenAndServeTLS(os.Args[1], os.Args[2], os.Args[3], nil))
}
