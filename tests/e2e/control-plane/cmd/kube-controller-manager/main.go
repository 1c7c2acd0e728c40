// Command kube-controller-manager is a copy of
// cmd/kube-controller-manager/controller-manager.go from k8s.io/kubernetes: it
// only runs the upstream controller manager command.
package main

import (
	"os"
	_ "time/tzdata" // for CronJob time zone support, as upstream

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	command := app.NewControllerManagerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
