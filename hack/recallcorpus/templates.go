package recallcorpus

import "fmt"

// The corpus's data: what speakers say (facts, procedures, events, distractors, chat)
// and what they later ask, in English and Chinese. Placeholders in braces are filled
// from a speaker's profile or an event's values. A question template starting with "!"
// names a rare token (a name, an order number, an amount, a date): lexical search
// should find it where dense search may not. The others paraphrase the evidence and
// share few words with it.

// texts holds a template list per language ("en", "zh"; "mix" for code-switched lines
// of the mixed speakers, who fall back to zh and en).
type texts map[string][]string

// factSlot is a fact or a procedure a speaker states once, perhaps restates later (the
// same value, other words), and perhaps updates (a new value: the newest statement
// is the one that answers).
type factSlot struct {
	name string
	// procedural slots are instructions to the agent; the others are semantic facts.
	procedural bool
	// values draws a value set for a speaker of the given language ("en" or "zh").
	values func(g *gen, lang string) map[string]string
	// updatable slots may change value later; the update templates see the old value
	// as {old}.
	updatable              bool
	state, restate, update texts
	ask                    texts
	distract               texts // episodic lines that share the slot's words
	// lookalike lines echo a rare-token question's wording without its token.
	lookalike texts
	valueKey  string
}

var factSlots = []factSlot{
	{
		name: "home", updatable: true, valueKey: "district",
		values: func(g *gen, lang string) map[string]string {
			c := pick(g, cities[lang])
			return map[string]string{"city": c.name, "district": pick(g, c.districts), "districts": join(c.districts)}
		},
		state: texts{
			"en": {"I live in {district}, {city} — about ten minutes on foot from the river.", "Our flat is in {district} in {city}; we've been there for two years now."},
			"zh": {"我住在{city}{district}区，走到地铁站只要五分钟。", "我家在{city}{district}区，已经住了快两年了。"},
		},
		restate: texts{
			"en": {"Like I said before, I'm based in {district}, so anything around there works for me."},
			"zh": {"我还是住在{district}区那边，附近的都可以。"},
		},
		update: texts{
			"en": {"Big change: we moved from {old} to {district} last weekend.", "Finally done moving out of {old} — the new place is in {district}."},
			"zh": {"我上周从{old}区搬到{district}区了。", "搬家总算搞定了，从{old}区搬去了{district}区。"},
		},
		ask: texts{
			"en": {"Which neighbourhood is my home in now?", "Where am I living these days?"},
			"zh": {"我现在住在哪个区？", "我目前的住处在哪一带？"},
		},
		distract: texts{
			"en": {"Rents in {other} have gone up again, a friend told me.", "Walked around {other} today, lovely cafés there."},
			"zh": {"听说{other}区的房租又涨了。", "今天去{other}区逛了一圈，那边小店挺多。"},
		},
	},
	{
		name: "job", updatable: true, valueKey: "job",
		values: func(g *gen, lang string) map[string]string {
			return map[string]string{"job": pick(g, jobs[lang])}
		},
		state: texts{
			"en": {"For context, I work as a {job}.", "I'm a {job}, in case that matters for the advice."},
			"zh": {"说明一下背景，我的工作是{job}。", "我是{job}，供你参考。"},
		},
		update: texts{
			"en": {"New job as of this week: no longer a {old}, I'm now a {job}."},
			"zh": {"我换工作了，不再做{old}，现在是{job}。"},
		},
		ask: texts{
			"en": {"What do I do for a living?", "What is my profession at the moment?"},
			"zh": {"我现在是做什么工作的？", "我的职业是什么来着？"},
		},
		distract: texts{
			"en": {"Long week at work, I need a break.", "Thinking about whether I should change careers someday."},
			"zh": {"这周上班好累，想休息。", "有时候会想要不要换个行业。"},
		},
	},
	{
		name: "allergy", valueKey: "allergen",
		values: func(g *gen, lang string) map[string]string {
			return map[string]string{"allergen": pick(g, allergens[lang])}
		},
		state: texts{
			"en": {"Heads up: I'm allergic to {allergen}, even a little gives me hives.", "One thing about me: {allergen} makes me break out in a rash, it's an allergy."},
			"zh": {"提醒一下，我对{allergen}过敏，吃一点就会起疹子。", "我有个情况：{allergen}我碰不得，会过敏。"},
		},
		restate: texts{
			"en": {"Reminder that {allergen} is a no-go for me, the allergy thing."},
			"zh": {"再说一次，{allergen}我是不能吃的，过敏。"},
		},
		ask: texts{
			"en": {"Is there any food that makes me ill?", "What should you leave out of recipes you suggest to me?"},
			"zh": {"我对什么食物过敏？", "给我推荐菜的时候要避开什么？"},
		},
		distract: texts{
			"en": {"Tried a new recipe tonight, it turned out great.", "My colleague has a bad allergy season this year."},
			"zh": {"今晚试了个新菜谱，味道不错。", "同事最近花粉过敏很严重。"},
		},
	},
	{
		name: "pet", valueKey: "pet_name",
		values: func(g *gen, lang string) map[string]string {
			return map[string]string{"pet_kind": pick(g, petKinds[lang]), "pet_name": pick(g, petNames[lang])}
		},
		state: texts{
			"en": {"We adopted a {pet_kind} named {pet_name} from the shelter.", "Our new {pet_kind} {pet_name} came home from the rescue centre today."},
			"zh": {"我们家从救助站领养了一只{pet_kind}，叫{pet_name}。"},
		},
		ask: texts{
			"en": {"What kind of animal lives with us?", "!Remind me, who is {pet_name}?"},
			"zh": {"我家养的是什么宠物？", "!{pet_name}是谁来着？"},
		},
		lookalike: texts{
			"en": {"Remind me who that person from the party was?"},
			"zh": {"聚会上那个人是谁来着？"},
		},
		distract: texts{
			"en": {"Saw the cutest {other_pet} at the park this morning.", "The neighbours' animals were noisy all night."},
			"zh": {"今天在公园看到一只超可爱的{other_pet}。", "邻居家的猫狗吵了一晚上。"},
		},
	},
	{
		name: "sibling", valueKey: "sib_name",
		values: func(g *gen, lang string) map[string]string {
			return map[string]string{"rel": pick(g, siblings[lang]), "sib_name": pick(g, firstNames[lang]), "sib_job": pick(g, jobs[lang]), "sib_city": pick(g, farCities[lang])}
		},
		state: texts{
			"en": {"My {rel} {sib_name} works as a {sib_job} over in {sib_city}."},
			"zh": {"我{rel}{sib_name}在{sib_city}当{sib_job}。"},
		},
		ask: texts{
			"en": {"In which city does my sibling work?", "!Where is {sib_name} based?"},
			"zh": {"我的兄弟姐妹在哪个城市工作？", "!{sib_name}现在在哪里？"},
		},
		lookalike: texts{
			"en": {"Where is the new office based? Nobody told me."},
			"zh": {"新办公室现在在哪里？没人告诉我。"},
		},
		distract: texts{
			"en": {"Family group chat is very busy today.", "Might visit {sib_city} someday, never been."},
			"zh": {"家里的群今天消息特别多。", "以后也许会去{sib_city}玩一趟。"},
		},
	},
	{
		name: "coffee", updatable: true, valueKey: "coffee",
		values: func(g *gen, lang string) map[string]string {
			return map[string]string{"coffee": pick(g, coffees[lang])}
		},
		state: texts{
			"en": {"I drink my coffee as a {coffee}, never with sugar."},
			"zh": {"我喝咖啡只要{coffee}，不加糖。"},
		},
		update: texts{
			"en": {"Changed my coffee habit: I've gone from {old} to {coffee}."},
			"zh": {"我现在不喝{old}了，改喝{coffee}。"},
		},
		restate: texts{
			"en": {"Same as always for me at the café: {coffee}."},
			"zh": {"咖啡还是老样子，{coffee}。"},
		},
		ask: texts{
			"en": {"How do I take my morning drink?", "What's my usual order at a café?"},
			"zh": {"我平时喝什么样的咖啡？", "去咖啡店我一般点什么？"},
		},
		distract: texts{
			"en": {"Had way too much coffee today, can't sleep.", "The coffee machine at the office broke again."},
			"zh": {"今天咖啡喝多了，睡不着。", "公司的咖啡机又坏了。"},
		},
	},
	{
		name: "hobby", updatable: true, valueKey: "hobby",
		values: func(g *gen, lang string) map[string]string {
			return map[string]string{"hobby": pick(g, hobbies[lang])}
		},
		state: texts{
			"en": {"I've been taking {hobby} lessons on Saturday mornings."},
			"zh": {"我每周六早上去上{hobby}课。"},
		},
		update: texts{
			"en": {"Dropped the {old} lessons; on Saturdays I do {hobby} now."},
			"zh": {"{old}课不上了，周六改去学{hobby}。"},
		},
		ask: texts{
			"en": {"What am I learning at the weekends?"},
			"zh": {"我周末在学什么？"},
		},
		distract: texts{
			"en": {"Saturday mornings are the best, slept in today.", "Thinking of picking up a new hobby, any ideas?"},
			"zh": {"周六早上最舒服了，今天睡了个懒觉。", "想培养个新爱好，有什么推荐？"},
		},
	},
	{
		name: "partner", valueKey: "partner",
		values: func(g *gen, lang string) map[string]string {
			return map[string]string{"partner": pick(g, partners[lang]), "bday": g.date(lang), "gift": pick(g, gifts[lang])}
		},
		state: texts{
			"en": {"{partner}'s birthday is on {bday}, and they love {gift}."},
			"zh": {"{partner}的生日是{bday}，特别喜欢{gift}。"},
		},
		ask: texts{
			"en": {"When do I need to celebrate my partner?", "!Whose birthday falls on {bday}?"},
			"zh": {"我对象哪天过生日？", "!{bday}是谁的生日？"},
		},
		lookalike: texts{
			"en": {"Whose birthday is coming up? I always forget these."},
			"zh": {"最近是谁要过生日来着？我总是忘。"},
		},
		distract: texts{
			"en": {"{partner} and I watched a film last night.", "Need gift ideas for a colleague's farewell."},
			"zh": {"昨晚和{partner}看了部电影。", "同事要离职了，送什么礼物好？"},
		},
	},
	{
		name: "address-first", procedural: true, valueKey: "-",
		values: func(*gen, string) map[string]string { return map[string]string{} },
		state: texts{
			"en": {"Always confirm my delivery address with me before you place an order."},
			"zh": {"以后帮我下单之前，一定先跟我确认收货地址。"},
		},
		restate: texts{
			"en": {"Again: check the shipping address with me first, then order."},
			"zh": {"还是老规矩，先核对地址再下单。"},
		},
		ask: texts{
			"en": {"What should you double-check before buying something for me?"},
			"zh": {"给我买东西前你得先确认什么？"},
		},
	},
	{
		name: "aisle-seat", procedural: true, valueKey: "-",
		values: func(*gen, string) map[string]string { return map[string]string{} },
		state: texts{
			"en": {"When you book flights for me, pick an aisle seat near the front."},
			"zh": {"订机票的时候帮我选靠过道、靠前的座位。"},
		},
		ask: texts{
			"en": {"Any rules for where I sit on planes?"},
			"zh": {"坐飞机我喜欢什么位置？"},
		},
	},
	{
		name: "no-early-meetings", procedural: true, valueKey: "-",
		values: func(*gen, string) map[string]string { return map[string]string{} },
		state: texts{
			"en": {"Don't put anything in my calendar before 10 am."},
			"zh": {"上午十点以前别给我安排会议。"},
		},
		ask: texts{
			"en": {"What's the earliest time I accept calls?"},
			"zh": {"最早几点可以给我约会？"},
		},
	},
	{
		name: "short-summaries", procedural: true, valueKey: "-",
		values: func(*gen, string) map[string]string { return map[string]string{} },
		state: texts{
			"en": {"Summaries for me should be three bullet points at most."},
			"zh": {"给我的总结最多写三条要点。"},
		},
		ask: texts{
			"en": {"How long should your recaps be?"},
			"zh": {"你给我写摘要要控制在多长？"},
		},
	},
	{
		name: "refund-escalate", procedural: true, valueKey: "-",
		values: func(*gen, string) map[string]string { return map[string]string{} },
		state: texts{
			"en": {"If a refund takes longer than a week, escalate it to a human agent."},
			"zh": {"退款超过一周还没到账，就转人工客服处理。"},
		},
		ask: texts{
			"en": {"What do you do when my money back is delayed?"},
			"zh": {"钱一直没退回来的话你该怎么办？"},
		},
	},
}

// eventKind is a kind of event a speaker reports (an episodic memory), with the
// questions it may later answer and distractors that share its words.
type eventKind struct {
	name string
	// values draws the event's values; unique names the value that must not repeat
	// within a speaker for the questions to have one answer ("kind" is the index in a
	// pool of paraphrased pairs: the same in both languages, so a mixed speaker's
	// knee is one knee).
	values func(g *gen, s *speaker, lang string) map[string]string
	unique string
	say    texts
	ask    texts
	// askKey names the value a question's answer hinges on: a question is dropped
	// when another event of the speaker shares it (it would have two answers).
	askKey   string
	distract texts
	// followUp, when set, is a later episodic line about the same event (not evidence:
	// it does not carry what the question asks).
	followUp texts
	// lookalike lines echo a rare-token question's wording without its token: what
	// dense search ranks first and lexical search passes over.
	lookalike texts
	// weight is how often the kind comes up, against the others' (default 1).
	weight int
}

var eventKinds = []eventKind{
	{
		name: "order", unique: "oid", askKey: "item",
		values: func(g *gen, _ *speaker, lang string) map[string]string {
			it := pick(g, items[lang])
			return map[string]string{"item": it.a, "item_syn": it.b, "shop": pick(g, shops[lang]), "oid": g.orderID(), "amount": g.amount(lang)}
		},
		say: texts{
			"en":  {"Ordered {item} from {shop} — order {oid}, {amount} in total.", "Just bought {item} on {shop}, order number {oid}, it came to {amount}."},
			"zh":  {"在{shop}买了{item}，订单号{oid}，一共{amount}。"},
			"mix": {"刚在 {shop} 下单了 {item}，order {oid}，花了{amount}。"},
		},
		ask: texts{
			"en": {"!Any news on {oid}? What was that one again?", "!Which purchase came to {amount}?", "Did the {item_syn} I bought ever arrive?"},
			"zh": {"!{oid}这个单子买的是啥来着？", "!哪一笔花了{amount}？", "我买的那个{item_syn}到了吗？"},
		},
		lookalike: texts{
			"en": {"Any news on my parcel? The tracking page says nothing.", "No idea what that delivery notification was about, what did I even buy?", "Which purchase was the expensive one last month?"},
			"zh": {"物流一直没更新，也不记得买的是啥了。", "这个快递单子到底是买的什么来着？", "上个月哪一笔花得最多？"},
		},
		weight: 3,
		followUp: texts{
			"en": {"The package from {shop} showed up today, box slightly dented."},
			"zh": {"{shop}的快递今天到了，盒子有点压坏了。"},
		},
		distract: texts{
			"en": {"Browsing for another {item_syn}, not sure I need one.", "Online shopping is getting out of hand, so many parcels."},
			"zh": {"又在看{item_syn}了，其实不太需要。", "最近网购太多了，快递堆了一门口。"},
		},
	},
	{
		name: "meal", unique: "restaurant", askKey: "restaurant",
		values: func(g *gen, s *speaker, lang string) map[string]string {
			return map[string]string{"friend": pick(g, s.friends[lang]), "restaurant": pick(g, restaurants[lang]), "dish": pick(g, dishes[lang])}
		},
		say: texts{
			"en":  {"Had dinner with {friend} at {restaurant}; {friend} swears by their {dish}.", "Lunch with {friend} today at {restaurant} — {friend} made me order the {dish}."},
			"zh":  {"和{friend}在{restaurant}吃了晚饭，{friend}说他们家的{dish}必点。"},
			"mix": {"和 {friend} 去了{restaurant}，{friend} 说一定要点{dish}，真的 amazing。"},
		},
		ask: texts{
			"en": {"!What did {friend} tell me to try at {restaurant}?", "Which dish was recommended to me at {restaurant}?"},
			"zh": {"!{friend}在{restaurant}让我点了什么菜？", "在{restaurant}别人推荐我吃什么？"},
		},
		lookalike: texts{
			"en": {"A friend told me to try some dish at a restaurant, forgot which.", "What should I order next time we eat out?"},
			"zh": {"朋友让我去那家店一定要点一个菜，忘了是啥。", "下次出去吃饭点什么好？"},
		},
		weight: 2,
		distract: texts{
			"en": {"Not in the mood to eat out tonight.", "{friend} keeps sending me restaurant reviews."},
			"zh": {"今晚不想出去吃饭。", "{friend}一直给我发餐厅点评。"},
		},
	},
	{
		name: "appointment", unique: "kind", askKey: "kind",
		values: func(g *gen, _ *speaker, lang string) map[string]string {
			i := g.r.IntN(len(doctors[lang]))
			d := doctors[lang][i]
			return map[string]string{"kind": fmt.Sprint(i), "doctor": d.a, "doctor_syn": d.b, "date": g.date(lang), "time": pick(g, times[lang]), "surname": pick(g, surnames[lang])}
		},
		say: texts{
			"en": {"Booked {doctor} with {surname} for {date} at {time}."},
			"zh": {"约了{date}{time}去{doctor}，医生姓{surname}。"},
		},
		ask: texts{
			"en": {"When is my {doctor_syn}?", "!Anything on {date}?"},
			"zh": {"我什么时候去{doctor_syn}？", "!{date}有安排吗？"},
		},
		lookalike: texts{
			"en": {"Is there anything on my calendar this week?", "Do I have anything booked soon? I keep forgetting."},
			"zh": {"这周日程上有什么安排吗？", "最近是不是约了什么？老是忘。"},
		},
		distract: texts{
			"en": {"I really should take better care of myself before the {doctor_syn}.", "Need to move some appointments next week, remind me."},
			"zh": {"去{doctor_syn}之前得好好注意一下。", "下周有几个预约要改时间，记得提醒我。"},
		},
	},
	{
		name: "trip", unique: "dest", askKey: "dest",
		values: func(g *gen, _ *speaker, lang string) map[string]string {
			return map[string]string{"dest": pick(g, farCities[lang]), "date": g.date(lang), "hotel": pick(g, hotels[lang])}
		},
		say: texts{
			"en": {"Booked flights to {dest} for {date}; staying at {hotel}."},
			"zh": {"订了{date}去{dest}的机票，住{hotel}。"},
		},
		ask: texts{
			"en": {"Where am I sleeping during the {dest} trip?", "!Where am I staying after the {date} flight?"},
			"zh": {"去{dest}的时候我住哪里？", "!{date}那趟航班之后我住哪？"},
		},
		lookalike: texts{
			"en": {"Where should I stay after a long flight? Somewhere quiet.", "I never remember which hotel I booked."},
			"zh": {"坐完长途航班之后住哪里比较好？", "老是记不住自己订的是哪家酒店。"},
		},
		distract: texts{
			"en": {"Thinking about visiting {dest} again next year.", "Hotels are so expensive this season."},
			"zh": {"明年还想再去一次{dest}。", "这个季节的酒店太贵了。"},
		},
	},
	{
		name: "work", unique: "project", askKey: "project",
		values: func(g *gen, _ *speaker, lang string) map[string]string {
			return map[string]string{"project": pick(g, projects[lang]), "colleague": pick(g, firstNames[lang])}
		},
		say: texts{
			"en":  {"Presented the {project} plan to the team today; {colleague} pushed back on the budget."},
			"zh":  {"今天给团队讲了{project}的方案，{colleague}对预算有意见。"},
			"mix": {"今天 present 了{project}的 plan，{colleague} 觉得 budget 太高。"},
		},
		ask: texts{
			"en": {"Who objected to the costs of {project}?", "How did my {project} pitch go?"},
			"zh": {"谁对{project}的花费不满意？", "{project}的汇报反响怎么样？"},
		},
		distract: texts{
			"en": {"The {project} deadline is stressing everyone out.", "{colleague} asked me for coffee next week."},
			"zh": {"{project}的截止日期让大家都很焦虑。", "{colleague}约我下周喝咖啡。"},
		},
	},
	{
		name: "injury", unique: "kind", askKey: "kind",
		values: func(g *gen, _ *speaker, lang string) map[string]string {
			i := g.r.IntN(len(bodyParts[lang]))
			b := bodyParts[lang][i]
			return map[string]string{"kind": fmt.Sprint(i), "body": b.a, "body_syn": b.b, "activity": pick(g, activities[lang])}
		},
		say: texts{
			"en": {"My {body} has been sore ever since {activity}."},
			"zh": {"{activity}之后我的{body}一直疼。"},
		},
		ask: texts{
			"en": {"Why is my {body_syn} aching?"},
			"zh": {"我的{body_syn}为什么不舒服？"},
		},
		distract: texts{
			"en": {"Feeling pretty good physically this week.", "Stretching every morning now, trying to stay healthy."},
			"zh": {"这周身体感觉还不错。", "现在每天早上都拉伸一下。"},
		},
	},
	{
		name: "bill", unique: "amount", askKey: "amount",
		values: func(g *gen, _ *speaker, lang string) map[string]string {
			return map[string]string{"bill": pick(g, bills[lang]), "amount": g.amount(lang)}
		},
		say: texts{
			"en": {"Paid the {bill} bill today: {amount}."},
			"zh": {"今天交了{bill}，{amount}。"},
		},
		ask: texts{
			"en": {"!Where did the {amount} go?"},
			"zh": {"!{amount}花到哪去了？"},
		},
		lookalike: texts{
			"en": {"Where does all my money go every month?", "Paid something today, can't remember what."},
			"zh": {"每个月的钱都不知道花到哪去了。", "今天好像付了一笔钱，想不起来是什么了。"},
		},
		weight: 2,
		distract: texts{
			"en": {"Bills, bills, bills. This month is expensive."},
			"zh": {"这个月开销好大。"},
		},
	},
}

// multiAsk asks for every meal with one friend: a question with several evidence turns.
var multiAsk = texts{
	"en": {"!Where have I eaten with {friend}?"},
	"zh": {"!我和{friend}一起去过哪些餐厅？"},
}

var chat = texts{
	"en": {"ok thanks", "sounds good", "lol yes", "great, thank you!", "perfect", "hmm let me think", "cool cool", "nice one",
		"got it", "thanks, that helps", "sure", "no worries", "haha true", "will do", "ok, talk later", "yep", "makes sense",
		"oh nice", "right right", "good morning!", "brb", "ok that's fine", "amazing, thanks", "fair enough"},
	"zh": {"哈哈好的", "好的谢谢", "嗯嗯", "收到", "明白了", "可以", "行", "好嘞", "谢啦", "没问题", "哈哈哈哈", "懂了", "先这样吧",
		"早上好", "好滴", "嗯，知道了", "辛苦了", "太好了", "稍等一下", "对对对", "原来如此", "好的呢"},
}

type city struct {
	name      string
	districts []string
}

var cities = map[string][]city{
	"en": {
		{"London", []string{"Hackney", "Camden", "Brixton", "Islington", "Peckham", "Walthamstow"}},
		{"Berlin", []string{"Kreuzberg", "Neukölln", "Prenzlauer Berg", "Friedrichshain", "Moabit"}},
		{"Toronto", []string{"Leslieville", "Roncesvalles", "the Annex", "Liberty Village", "Riverdale"}},
	},
	"zh": {
		{"北京", []string{"朝阳", "海淀", "东城", "西城", "丰台", "顺义"}},
		{"上海", []string{"徐汇", "静安", "浦东", "长宁", "杨浦"}},
		{"成都", []string{"武侯", "锦江", "青羊", "成华", "金牛"}},
	},
}

var (
	jobs = texts{
		"en": {"data analyst at a logistics firm", "paediatric nurse", "high-school chemistry teacher", "backend developer at a fintech startup",
			"architect at a small studio", "pastry chef", "physiotherapist", "freelance translator"},
		"zh": {"物流公司的数据分析师", "儿科护士", "高中化学老师", "金融科技公司的后端开发", "建筑设计师", "甜点师", "康复治疗师", "自由译者"},
	}
	allergens = texts{
		"en": {"peanuts", "shellfish", "sesame", "kiwi", "hazelnuts", "celery"},
		"zh": {"花生", "虾蟹", "芝麻", "猕猴桃", "芒果", "牛奶"},
	}
	petKinds = texts{
		"en": {"greyhound", "tabby cat", "corgi", "rabbit", "parrot", "border collie"},
		"zh": {"柯基", "橘猫", "布偶猫", "兔子", "金毛", "鹦鹉"},
	}
	petNames = texts{
		"en": {"Biscuit", "Pimento", "Juniper", "Waffles", "Nutmeg", "Ziggy", "Pickle", "Marzipan"},
		"zh": {"豆包", "团子", "可乐", "芝麻糊", "小满", "煤球", "年糕", "栗子"},
	}
	siblings = texts{
		"en": {"sister", "brother", "younger sister", "older brother"},
		"zh": {"姐姐", "哥哥", "妹妹", "弟弟"},
	}
	firstNames = texts{
		"en": {"Odile", "Bartek", "Seun", "Marguerite", "Ravi", "Tobias", "Keiko", "Anselm", "Yusra", "Fintan", "Ilse", "Dmitri", "Oona", "Lorcan"},
		"zh": {"周岚", "老郑", "孟婷", "阿斌", "许诺", "韩冰", "唐果", "小叶", "宋嘉", "欧阳青", "潘越", "贺一鸣"},
	}
	farCities = texts{
		"en": {"Lisbon", "Porto", "Rotterdam", "Leipzig", "Valencia", "Bergen", "Tampere", "Graz", "Ghent", "Ljubljana", "Trieste", "Kraków"},
		"zh": {"杭州", "厦门", "西安", "昆明", "青岛", "大理", "哈尔滨", "桂林", "苏州", "长沙", "拉萨", "三亚"},
	}
	coffees = texts{
		"en": {"flat white with oat milk", "double espresso, black", "iced americano", "latte with a splash of cold milk", "cortado"},
		"zh": {"热美式", "燕麦拿铁", "冰美式", "手冲", "澳白"},
	}
	hobbies = texts{
		"en": {"cello", "salsa", "pottery", "bouldering", "Japanese", "watercolour"},
		"zh": {"大提琴", "游泳", "陶艺", "攀岩", "日语", "书法"},
	}
	partners = texts{
		"en": {"Ines", "Daniel", "Aiko", "Rafael", "Mirela", "Jonas"},
		"zh": {"小林", "阿杰", "思琪", "子涵", "文博", "晓彤"},
	}
	gifts = texts{
		"en": {"vintage vinyl records", "orchids", "dark chocolate", "board games", "fountain pens"},
		"zh": {"黑胶唱片", "兰花", "黑巧克力", "桌游", "钢笔"},
	}
	shops = texts{
		"en": {"Amazon", "IKEA", "Decathlon", "Zalando", "Currys", "Etsy"},
		"zh": {"京东", "淘宝", "拼多多", "天猫", "苏宁", "小米商城"},
	}
	restaurants = texts{
		"en": {"Casa Lupita", "the Georgian place on Elm Street", "Ramen Kazu", "Bistro Lune", "the Sichuan spot near the station",
			"Taverna Eleni", "the Ethiopian café on Mill Road", "Osteria Fiume", "Dosa Corner", "the new Korean barbecue", "Café Aalto", "Smokehouse 44"},
		"zh": {"胡同里的云南菜馆", "楼下的烤鸭店", "新开的潮汕牛肉火锅", "一家湘菜馆", "巷子里的苍蝇馆子", "商场里的日料店",
			"江边的海鲜大排档", "老字号的淮扬菜馆", "那家贵州酸汤鱼", "一家新疆烤肉店", "东北饺子馆", "粤式早茶店"},
	}
	dishes = texts{
		"en": {"khachapuri", "mole negro", "tonkotsu ramen", "duck confit", "mapo tofu", "moussaka", "injera platter", "cacio e pepe", "masala dosa", "bulgogi"},
		"zh": {"汽锅鸡", "烤鸭卷饼", "手打牛肉丸", "剁椒鱼头", "毛血旺", "鳗鱼饭", "椒盐皮皮虾", "狮子头", "酸汤鱼", "羊肉串"},
	}
	surnames = texts{
		"en": {"Dr. Okafor", "Dr. Lindqvist", "Dr. Haddad", "Dr. Moreau", "Dr. Castellanos", "Dr. Nakamura"},
		"zh": {"王", "刘", "陈", "杨", "黄", "吴"},
	}
	times = texts{
		"en": {"9:30", "11:15", "2 pm", "4:45", "8:00"},
		"zh": {"上午九点半", "上午十一点", "下午两点", "下午四点", "晚上七点"},
	}
	hotels = texts{
		"en": {"Hotel Miramar", "Pension Adler", "the Grand Lodge", "Casa do Rio", "Hotel Nordlys", "the Linden Inn", "Villa Serena", "Hostel Kompas"},
		"zh": {"西湖边的民宿", "亚朵酒店", "全季酒店", "古城里的客栈", "海边的度假村", "希尔顿欢朋", "青年旅舍", "如家精选"},
	}
	projects = texts{
		"en": {"Atlas migration", "Q3 pricing", "Harbor onboarding", "Lighthouse dashboard", "warehouse robotics", "loyalty app redesign", "Falcon data pipeline"},
		"zh": {"北极星迁移", "三季度定价", "新员工入职平台", "灯塔看板", "仓储机器人", "会员小程序改版", "数据中台"},
	}
	bills = texts{
		"en": {"electricity", "water", "internet", "phone", "council tax", "gas"},
		"zh": {"电费", "水费", "宽带费", "话费", "物业费", "燃气费"},
	}
)

// pair is a word and a paraphrase of it (what a later question calls it).
type pair struct{ a, b string }

var (
	items = map[string][]pair{
		"en": {{"a standing desk", "height-adjustable table"}, {"noise-cancelling headphones", "headset"}, {"a cast-iron skillet", "frying pan"},
			{"running shoes", "trainers"}, {"an e-reader", "ebook device"}, {"a robot vacuum", "cleaning robot"}, {"an espresso grinder", "coffee mill"},
			{"a folding bike", "bicycle"}, {"a mechanical keyboard", "typing board"}, {"a down jacket", "winter coat"}},
		"zh": {{"一台空气净化器", "净化器"}, {"一双跑鞋", "运动鞋"}, {"一个电饭煲", "煮饭的锅"}, {"一副降噪耳机", "耳麦"}, {"一把人体工学椅", "办公椅"},
			{"一台扫地机器人", "扫地机"}, {"一个行李箱", "拉杆箱"}, {"一台投影仪", "投影"}, {"一件羽绒服", "冬天的外套"}, {"一个电动牙刷", "牙刷"}},
	}
	doctors = map[string][]pair{
		"en": {{"the dentist", "teeth check-up"}, {"a physiotherapy session", "physio visit for my back"}, {"an eye test", "eye exam"},
			{"a skin check", "dermatologist visit"}, {"a blood test", "lab work"}},
		"zh": {{"看牙医", "检查牙齿"}, {"做理疗", "康复治疗"}, {"查视力", "眼科检查"}, {"看皮肤科", "皮肤检查"}, {"抽血化验", "验血"}},
	}
	bodyParts = map[string][]pair{
		"en": {{"left knee", "leg joint"}, {"lower back", "spine"}, {"right wrist", "hand"}, {"shoulder", "arm"}},
		"zh": {{"左膝盖", "腿"}, {"腰", "后背"}, {"右手腕", "手"}, {"肩膀", "胳膊"}},
	}
	activities = texts{
		"en": {"the half-marathon", "moving the sofa", "that long hike", "the football match", "gardening all weekend"},
		"zh": {"跑完半马", "搬了沙发", "那次爬山", "踢完足球", "周末整理花园"},
	}
)
