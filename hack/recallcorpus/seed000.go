package recallcorpus

import "github.com/amemory/memory-operator/internal/memory"

// SeedMemory is one memory of seed 000's recall check; Name identifies it in the table.
type SeedMemory struct {
	Name    string
	Type    memory.Type
	Key     string
	Content string
	// Restates names an earlier memory this one says again in other words: with
	// near-duplicate detection on it reinforces that memory instead of adding a copy.
	Restates string
}

// SeedCheck is one question of the check table: it must find Want first.
type SeedCheck struct{ Scenario, Query, Want string }

// The memories of seed 000, section 4.4 (its agent migrated a customer-service
// agent and checked that it still "remembers the old accounts"): user A has a hot-coffee
// preference, an order that never shipped, and the address-first procedure, among
// other facts and events (one of them said twice); user B has memories that look
// alike but differ. test/clients runs the table through every door; the recall
// benchmark (hack/bench, make bench-recall) through the native one.
var (
	SeedUserA = "user:u_1024"
	SeedUserB = "user:u_2048"

	SeedMemoriesA = []SeedMemory{
		{"A:hot-coffee", memory.Semantic, "preference.drink", `{"text":"用户要求把咖啡换成热的，以后都按热咖啡准备，不要冰的"}`, ""},
		{"A:unshipped-order", memory.Episodic, "", `{"text":"用户的订单 A1024 付款后一直没有发货，用户来催过物流","order_id":"A1024","status":"未发货"}`, ""},
		{"A:address-first", memory.Procedural, "procedure.delivery", `{"text":"处理配送问题的老规矩：先确认收货地址，再问配送时间","steps":["先确认收货地址","再询问方便的配送时间"]}`, ""},
		{"A:address", memory.Semantic, "address", `{"text":"用户住在朝阳区，送货可以不用电话联系"}`, ""},
		{"A:vegetarian", memory.Semantic, "", `{"text":"用户是素食主义者，不吃肉"}`, ""},
		{"A:contact-time", memory.Semantic, "", `{"text":"用户习惯下午四点联系客服"}`, ""},
		{"A:refund", memory.Episodic, "", `{"text":"用户上次咨询过退款方案，选择了原路退回"}`, ""},
		{"A:stew", memory.Semantic, "", `{"text":"用户喜欢番茄牛腩的炖法"}`, ""},
		// The user says it again, in other words (similarity about 0.98 under e5).
		{"A:vegetarian-again", memory.Semantic, "", `{"text":"用户吃素，不吃任何肉类"}`, "A:vegetarian"},
	}
	SeedMemoriesB = []SeedMemory{
		{"B:iced-coffee", memory.Semantic, "preference.drink", `{"text":"用户喜欢冰咖啡，夏天要多加冰"}`, ""},
		{"B:shipped-order", memory.Episodic, "", `{"text":"用户的订单 B2048 已经发货，但快递显示还没签收","order_id":"B2048","status":"已发货"}`, ""},
		{"B:time-first", memory.Procedural, "procedure.delivery", `{"text":"这位用户的习惯：先确认配送时间，再核对地址"}`, ""},
		{"B:address", memory.Semantic, "address", `{"text":"用户住在海淀区"}`, ""},
	}

	// SeedChecks is the check table: each question must find its memory first.
	SeedChecks = []SeedCheck{
		{"preference (偏好记忆)", "上次我不是让你把咖啡换热的了吗？这次还按热的", "A:hot-coffee"},
		{"episode (情景记忆)", "我之前有个订单一直没发货，查到了吗", "A:unshipped-order"},
		{"procedure (程序性记忆)", "还是老规矩，先确认地址再问配送时间", "A:address-first"},
	}
)
