package kubewatch

import (
	"context"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sless.dev/sless/internal/endpointslice"
	"sless.dev/sless/internal/wire"
)

func (w *Watcher) sliceChanged(obj any) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || slice.Labels[wire.FunctionLabel] == "" {
		return
	}
	key := types.NamespacedName{Namespace: slice.Namespace, Name: slice.Labels[wire.FunctionLabel]}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, known := w.known[key]; known {
		w.pushInstances(key)
	}
}

// pushInstances reads a function's EndpointSlices from the cache and
// pushes its ready instances' admin addresses. w.mu must be held.
func (w *Watcher) pushInstances(key types.NamespacedName) {
	var list discoveryv1.EndpointSliceList
	// A read of the synced local cache: it neither blocks nor waits.
	err := w.cache.List(context.Background(), &list,
		client.InNamespace(key.Namespace), client.MatchingLabels{wire.FunctionLabel: key.Name})
	if err != nil {
		w.log.Error("list endpoint slices", "namespace", key.Namespace, "function", key.Name, "err", err)
		return
	}
	slices := make([]*discoveryv1.EndpointSlice, len(list.Items))
	for i := range list.Items {
		slices[i] = &list.Items[i]
	}
	w.target.SetInstances(key.Namespace, key.Name, endpointslice.ReadyAddrs(slices, wire.AdminPortName, wire.AdminPort))
}
